"""What the orchestrator shows operators: its saga's state on an orchestrated order's page."""

from django.conf import settings

from kernel.operations import OrderPanel, register_order_panel
from orchestrator.models import OrderSaga
from orchestrator.selectors import saga_deadline
from orchestrator.services import STEPS


def saga_panel(order_id: str) -> dict | None:
    saga = OrderSaga.objects.filter(order_id=order_id).first()
    if saga is None:
        return None  # a choreographed order
    step = STEPS.get(saga.status)
    return {
        "saga": saga,
        "transitions": list(saga.transitions.order_by("version")),
        "waiting_for": step.command if step else "",
        "attempts": settings.ORCHESTRATOR_STEP_ATTEMPTS,
        "deadline": saga_deadline(saga),
    }


def register() -> None:
    register_order_panel(OrderPanel("orchestrated-saga", "admin/orchestrator/saga_panel.html", saga_panel))
