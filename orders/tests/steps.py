"""What orders offers the fault tests (faultlib.steps): its orders placed, cancelled, expired and
read back, and the storefront's copy of the catalogue. Test code: orders' production code never
imports it."""

import uuid

from orders.models import Order, StorefrontProduct
from orders.services.checkout import Line, order_place
from orders.services.saga import InvalidOrderState, order_cancel, orders_expire

# The stock outcomes orders decides on only once the order's payment success has reached it: one
# delivered first is retried, and after its last attempt a dead letter saying WAITED_FOR_PAYMENT
# (the deadline then fails and compensates the order). (consumer, event type).
WAITS_FOR_PAYMENT = frozenset(
    {("orders", "inventory.stock.reserved"), ("orders", "inventory.stock.reservation_failed")}
)
WAITED_FOR_PAYMENT = "before the order's payment succeeded here"


def storefront_size() -> int:
    return StorefrontProduct.objects.count()


def orders_pending(order_ids) -> bool:
    return Order.objects.filter(pk__in=order_ids, status=Order.Status.PENDING).exists()


def order_statuses(order_ids) -> list[str]:
    return list(Order.objects.filter(pk__in=order_ids).values_list("status", flat=True))


def saga_seconds() -> dict[str, float]:
    """Each order's saga, checkout to its last change, in seconds."""
    return {str(o.id): (o.updated_at - o.created_at).total_seconds() for o in Order.objects.all()}


def order_placed(*, customer_id: str, sku: str, quantity: int, payment_token: str) -> uuid.UUID:
    return order_place(customer_id=customer_id, lines=[Line(sku, quantity)], payment_token=payment_token).id


def order_cancelled(order_id) -> bool:
    """Cancel ``order_id``; False when its state refuses (it ended already)."""
    try:
        order_cancel(order_id=order_id)
    except InvalidOrderState:
        return False
    return True


def orders_expired() -> None:
    """The saga deadline strikes now for every pending order."""
    orders_expire(timeout_seconds=0)
