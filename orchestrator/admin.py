"""The operator's view of an orchestrated order: its saga's state, version, step keys and every
transition, read-only (a saga moves only through its messages)."""

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from kernel.saga_admin import SagaAdmin
from orchestrator.models import OrderSaga
from orchestrator.selectors import step_keys_in_order, waiting_for


@admin.register(OrderSaga)
class OrderSagaAdmin(SagaAdmin):
    list_display = ["order", "state", "step_attempt", "version", "failure_reason", "updated"]
    fields = [
        *("id", "key", "definition_version", "state", "step_since", "failure_reason", "attempt", "deadline_id"),
        *("version", "keys_by_step", "order_data", "created_at", "updated_at", "saga_diagram"),
    ]

    @admin.display(description="attempt")
    def step_attempt(self, saga):
        """The sends of the step it waits for; a finished saga waits for none."""
        return saga.attempt if waiting_for(saga) else "-"

    @admin.display(description="step keys")
    def keys_by_step(self, saga):
        rows = format_html_join("", "<tr><td>{}</td><td>{}</td></tr>", step_keys_in_order(saga))
        return format_html("<table>{}</table>", rows)

    @admin.display(description="the order, as its commands need it")
    def order_data(self, saga):
        return saga.data
