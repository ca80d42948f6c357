"""The saga of an order as its admin page shows it (operations.saga_page draws it)."""

from django.utils import timezone
from reliable_messaging.operator import WaitingPlace

from operations.saga_page import saga_view, what_this_deployment_saw
from orders.models import Order
from orders.selectors import order_timeline


def order_saga_view(order: Order) -> dict:
    """Template context: each event with its handling, and where the saga is waiting."""
    running = order.status == Order.Status.PENDING
    view = saga_view(order_timeline(order=order, detailed=True), started_at=order.created_at, running=running)
    return {
        **view,
        "outcome": saga_outcome(order, view["waiting"]),
        "order_age": (timezone.now() - order.created_at).total_seconds(),
        "pending": running,
    }


# The banner's colour and words per final status: only a confirmed order is good news.
OUTCOME_WORDS = {
    Order.Status.CONFIRMED: ("ok", "The saga is complete: the order is confirmed"),
    Order.Status.FAILED: ("failed", "The saga has ended: the order failed, no sale"),
    Order.Status.CANCELLED: ("cancelled", "The saga has ended: the order was cancelled"),
}


def saga_outcome(order: Order, waiting: list[WaitingPlace]) -> dict | None:
    """What the banner says of an order nothing waits for; None while anything waits or the order
    is still PENDING (the banner lists the waits instead)."""
    if waiting or order.status == Order.Status.PENDING:
        return None
    return what_this_deployment_saw(*OUTCOME_WORDS[order.status])
