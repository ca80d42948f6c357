from django.contrib import admin

from orders.models import CheckoutRequest, Order, OrderLine, StorefrontProduct


class ReadOnlyAdmin(admin.ModelAdmin):
    """Orders change only through the saga's services, which also publish the events."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class OrderLineInline(admin.TabularInline):
    model = OrderLine
    fields = ["sku", "quantity", "unit_price"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Order)
class OrderAdmin(ReadOnlyAdmin):
    list_display = ["id", "status", "failure_reason", "customer_id", "total", "currency", "created_at", "updated_at"]
    list_filter = ["status", "failure_reason"]
    search_fields = ["=id", "customer_id"]
    date_hierarchy = "created_at"
    inlines = [OrderLineInline]

    def has_view_permission(self, request, obj=None):
        return request.user.is_staff and super().has_view_permission(request, obj)


@admin.register(StorefrontProduct)
class StorefrontProductAdmin(ReadOnlyAdmin):
    list_display = ["sku", "name", "price", "available", "version", "updated_at"]
    search_fields = ["sku", "name"]


@admin.register(CheckoutRequest)
class CheckoutRequestAdmin(ReadOnlyAdmin):
    list_display = ["key", "state", "order_id", "response_status", "created_at"]
    list_filter = ["state"]
    search_fields = ["=key", "=order_id"]
    exclude = ["response_body"]
