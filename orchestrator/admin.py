"""The operator's view of an orchestrated order: its saga's state, version, step keys and every
transition, read-only (a saga moves only through its messages)."""

from django.contrib import admin
from django.utils.html import format_html, format_html_join
from reliable_messaging.operator import ReadOnlyAdmin
from reliable_messaging.sagas import SagaTransition, definition, diagram

from kernel.templatetags.ops import compact_time, short
from orchestrator.models import OrderSaga
from orchestrator.selectors import step_keys_in_order, waiting_for


class SagaTransitionInline(admin.TabularInline):
    model = SagaTransition
    fields = ["version", "from_state", "to_state", "cause", "at"]
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
    list_display = ["order", "state", "step_attempt", "version", "failure_reason", "updated"]
    list_filter = ["state"]
    search_fields = ["key", "id"]
    ordering = ["-updated_at"]  # the latest moves first
    fields = [
        *("id", "key", "definition_version", "state", "step_since", "failure_reason", "attempt", "deadline_id"),
        *("version", "keys_by_step", "order_data", "created_at", "updated_at", "saga_diagram"),
    ]

    @admin.display(description="order id", ordering="key")
    def order(self, saga):
        return short(saga.key)

    @admin.display(description="attempt")
    def step_attempt(self, saga):
        """The sends of the step it waits for; a finished saga waits for none."""
        return saga.attempt if waiting_for(saga) else "-"

    @admin.display(description="updated (UTC)", ordering="updated_at")
    def updated(self, saga):
        return compact_time(saga.updated_at)

    @admin.display(description="step keys")
    def keys_by_step(self, saga):
        rows = format_html_join("", "<tr><td>{}</td><td>{}</td></tr>", step_keys_in_order(saga))
        return format_html("<table>{}</table>", rows)

    @admin.display(description="the order, as its commands need it")
    def order_data(self, saga):
        return saga.data

    @admin.display(description="the saga (Mermaid)")
    def saga_diagram(self, saga):
        return format_html('<pre class="mermaid">{}</pre>', diagram(definition(saga.name, saga.definition_version)))
