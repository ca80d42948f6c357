from django.contrib import admin
from reliable_messaging.operator import ReadOnlyAdmin

from inventory.models import Product, Reservation
from inventory.services import product_upsert


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["sku", "name", "price", "stock", "version", "updated_at"]
    search_fields = ["sku", "name"]
    readonly_fields = ["version", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, "sku"] if obj else self.readonly_fields

    def save_model(self, request, obj, form, change):
        # Through the service, so the storefront hears of the change.
        product_upsert(sku=obj.sku, name=obj.name, price=obj.price, stock=obj.stock)

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyAdmin):
    list_display = ["order_id", "status", "reason", "created_at", "updated_at"]
    list_filter = ["status"]
    search_fields = ["order_id"]
