"""The order's side of the saga: guarded transitions, each publishing its outcome.

A transition applies only from the state it expects; an event that no longer applies (late,
duplicated, out of order) changes nothing and is logged. The order's row lock serialises
every handler of one order.
"""

import logging
import uuid
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from messaging.api import publish
from orders.metrics import saga_outcome_observed
from orders.models import Order

logger = logging.getLogger(__name__)


class OrderNotFound(Exception):
    def __init__(self, order_id: uuid.UUID):
        super().__init__(f"no order {order_id}")
        self.order_id = order_id


class InvalidOrderState(Exception):
    def __init__(self, order: Order):
        super().__init__(f"order {order.id} is {order.status}")
        self.order = order


def _lock_order(order_id: uuid.UUID) -> Order:
    order = Order.objects.select_for_update().filter(pk=order_id).first()
    if order is None:
        raise OrderNotFound(order_id)
    return order


def _publish(order: Order, event_type: str, **fields) -> None:
    publish(
        event_type=event_type,
        aggregate_type="order",
        aggregate_id=str(order.id),
        payload={"order_id": str(order.id), **fields},
    )


@transaction.atomic(savepoint=False)
def order_confirm(*, order_id: uuid.UUID) -> None:
    order = _lock_order(order_id)
    if order.status != Order.Status.PENDING:
        logger.info("confirmation ignored: order is already %s", order.status)
        return
    order.status = Order.Status.CONFIRMED
    order.save(update_fields=["status", "updated_at"])
    saga_outcome_observed(order=order, previous_status=Order.Status.PENDING)
    _publish(order, "orders.order.confirmed", total=f"{order.total:.2f}", currency=order.currency)


@transaction.atomic(savepoint=False)
def order_fail(*, order_id: uuid.UUID, reason: str) -> None:
    order = _lock_order(order_id)
    if order.status != Order.Status.PENDING:
        logger.info("failure (%s) ignored: order is already %s", reason, order.status)
        return
    _fail(order, reason)


def _fail(order: Order, reason: str) -> None:
    order.status, order.failure_reason = Order.Status.FAILED, reason
    order.save(update_fields=["status", "failure_reason", "updated_at"])
    saga_outcome_observed(order=order, previous_status=Order.Status.PENDING)
    _publish(order, "orders.order.failed", reason=reason)


@transaction.atomic(savepoint=False)
def order_cancel(*, order_id: uuid.UUID) -> Order:
    """Cancel a pending or confirmed order now; payments and inventory compensate."""
    order = _lock_order(order_id)
    if order.status not in (Order.Status.PENDING, Order.Status.CONFIRMED):
        raise InvalidOrderState(order)
    previous = order.status
    order.status = Order.Status.CANCELLED
    order.save(update_fields=["status", "updated_at"])
    saga_outcome_observed(order=order, previous_status=previous)
    _publish(order, "orders.order.cancelled", previous_status=previous)
    return order


def orders_expire(*, timeout_seconds: float, batch_size: int = 200) -> int:
    """Fail the orders still PENDING after the saga deadline; return how many."""
    cutoff = timezone.now() - timedelta(seconds=timeout_seconds)
    expired = 0
    while True:
        with transaction.atomic():
            batch = list(
                Order.objects.select_for_update(skip_locked=True)
                .filter(status=Order.Status.PENDING, created_at__lt=cutoff)
                .order_by("created_at")[:batch_size]
            )
            for order in batch:
                _fail(order, Order.FailureReason.TIMEOUT)
        expired += len(batch)
        if len(batch) < batch_size:
            return expired
