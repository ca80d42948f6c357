"""The operator's view of an orchestrated order: its saga's state, version, step keys and every
transition, read-only (a saga moves only through its messages)."""

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from kernel.admin import ReadOnlyAdmin
from kernel.templatetags.ops import compact_time, short
from orchestrator.models import OrderSaga, SagaTransition
from orchestrator.selectors import step_keys_in_order
from orchestrator.services import STEPS


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
    list_display = ["order", "status", "step_attempt", "version", "failure_reason", "updated"]
    list_filter = ["status"]
    search_fields = ["order_id", "saga_id"]
    ordering = ["-updated_at"]  # the latest moves first
    fields = [
        *("saga_id", "order_id", "status", "step_since", "failure_reason", "attempt", "deadline_id", "version"),
        *("keys_by_step", "items", "amount", "currency", "ship_to", "created_at", "updated_at"),
    ]  # never the payment token
    inlines = [SagaTransitionInline]

    @admin.display(description="order id", ordering="order_id")
    def order(self, saga):
        return short(saga.order_id)

    @admin.display(description="attempt")
    def step_attempt(self, saga):
        """The sends of the step it waits for; a finished saga waits for none."""
        return saga.attempt if saga.status in STEPS else "-"

    @admin.display(description="updated (UTC)", ordering="updated_at")
    def updated(self, saga):
        return compact_time(saga.updated_at)

    @admin.display(description="step keys")
    def keys_by_step(self, saga):
        rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", step_keys_in_order(saga))
        return format_html("<table>{}</table>", rows)
