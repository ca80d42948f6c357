"""What the orchestrator shows operators: its saga's state on an orchestrated order's page, and
gauges on ``/metrics`` (the sagas waiting, by state, and the longest wait)."""

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from kernel.operations import OrderPanel, register_database_gauges, register_order_panel
from orchestrator.conf import setting
from orchestrator.models import OrderSaga
from orchestrator.selectors import saga_deadline, sagas_waiting, step_keys_in_order, waiting_for


def saga_panel(order_id: str) -> dict | None:
    saga = OrderSaga.objects.filter(key=order_id).first()
    if saga is None:
        return None  # a choreographed order
    return {
        "saga": saga,
        "keys": step_keys_in_order(saga),
        "transitions": list(saga.transitions.order_by("version")),
        "waiting_for": waiting_for(saga),
        "attempts": setting("ORCHESTRATOR_STEP_ATTEMPTS"),
        "deadline": saga_deadline(saga),
    }


def saga_gauges():
    waiting = sagas_waiting(timezone.now())
    by_status = GaugeMetricFamily(
        "orchestrator_sagas_waiting",
        "Orchestrated sagas waiting for a participant's reply, by state (a step or a compensation).",
        labels=["status"],
    )
    for status, count in waiting.by_status.items():
        by_status.add_metric([status], count)
    yield by_status
    yield GaugeMetricFamily(
        "orchestrator_saga_oldest_waiting_seconds",
        "How long the saga waiting longest has been in its state (0 when none waits); its step is sent again "
        "every ORCHESTRATOR_STEP_TIMEOUT, ORCHESTRATOR_STEP_ATTEMPTS times, then compensated.",
        value=waiting.oldest_waiting_seconds,
    )


def register() -> None:
    register_order_panel(OrderPanel("orchestrated-saga", "admin/orchestrator/saga_panel.html", saga_panel))
    register_database_gauges("orchestrator", saga_gauges)
