from django.contrib import admin

from payments.models import Payment


@admin.register(Payment)
class PaymentAdmin(admin.ModelAdmin):
    """Read-only: money moves only through the saga and the gateway."""

    list_display = ["order_id", "status", "amount", "currency", "decline_code", "updated_at"]
    list_filter = ["status"]
    search_fields = ["order_id", "charge_id"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
