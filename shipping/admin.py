from django.contrib import admin, messages
from reliable_messaging.operator import ReadOnlyAdmin

from shipping.models import Shipment
from shipping.services import shipments_dispatch


@admin.register(Shipment)
class ShipmentAdmin(ReadOnlyAdmin):
    """Read-only: a shipment changes only through the saga's events and the dispatch action."""

    list_display = ["order_id", "status", "created_at", "dispatched_at", "updated_at"]
    list_filter = ["status"]
    search_fields = ["order_id", "id"]
    actions = ["dispatch"]

    @admin.action(description="Dispatch the selected shipments", permissions=["dispatch"])
    def dispatch(self, request, queryset):
        result = shipments_dispatch(shipment_ids=list(queryset.values_list("pk", flat=True)))
        if result.dispatched:
            self.message_user(request, f"Dispatched {len(result.dispatched)} shipment(s).", messages.SUCCESS)
        if result.refused:
            refused = ", ".join(f"{s.order_id} ({s.status})" for s in result.refused)
            self.message_user(
                request, f"Not dispatched, only a PREPARING shipment can be: {refused}.", messages.WARNING
            )

    def has_dispatch_permission(self, request):
        return request.user.has_perm("shipping.change_shipment")
