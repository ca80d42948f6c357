"""The operator's view of an orchestrated order: its saga's state, version, step keys and every
transition, read-only (a saga moves only through its messages)."""

from django.contrib import admin

from kernel.admin import ReadOnlyAdmin
from orchestrator.models import OrderSaga, SagaTransition


class SagaTransitionInline(admin.TabularInline):
    model = SagaTransition
    fields = ["version", "from_status", "to_status", "cause", "at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["version"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(OrderSaga)
class OrderSagaAdmin(ReadOnlyAdmin):
    list_display = ["order_id", "status", "attempt", "version", "failure_reason", "updated_at"]
    list_filter = ["status"]
    search_fields = ["order_id", "saga_id"]
    fields = [
        *("saga_id", "order_id", "status", "step_since", "failure_reason", "attempt", "deadline_id", "version"),
        *("step_keys", "items", "amount", "currency", "ship_to", "created_at", "updated_at"),
    ]  # never the payment token
    inlines = [SagaTransitionInline]
