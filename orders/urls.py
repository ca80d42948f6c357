from django.urls import path

from orders.apis import CheckoutApi, OrderCancelApi, OrderDetailApi, OrderReturnApi, ProductListApi

urlpatterns = [
    path("products/", ProductListApi.as_view(), name="products"),
    path("checkout/", CheckoutApi.as_view(), name="checkout"),
    path("orders/<str:order_id>/", OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<str:order_id>/cancel/", OrderCancelApi.as_view(), name="order-cancel"),
    path("orders/<str:order_id>/return/", OrderReturnApi.as_view(), name="order-return"),
]
