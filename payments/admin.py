from django.contrib import admin
from reliable_messaging.operator import ReadOnlyAdmin

from payments.models import Payment


@admin.register(Payment)
class PaymentAdmin(ReadOnlyAdmin):
    """Read-only: money moves only through the saga and the gateway."""

    list_display = [
        "order_id",
        "status",
        "amount",
        "currency",
        "decline_code",
        "call_attempts",
        "call_error",
        "updated_at",
    ]
    list_filter = ["status"]
    search_fields = ["order_id", "charge_id"]
    exclude = ["token"]  # a payment token is never shown outside the call that needs it
