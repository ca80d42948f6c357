"""The order's side of the saga: guarded transitions, each publishing its outcome.

A transition applies only from the state it expects; an event that no longer applies (late,
duplicated, out of order) changes nothing and is logged. The order's row lock serialises
every handler of one order.

The saga also refuses what it cannot have caused (``_ignore``: acked with a warning and a
metric, no state change, no event): an event about an order it never had (checkout
writes the order and its first event in one commit, so an honest one never precedes it), a
payment whose amount is not the order's total, a decline after a success, a reservation of
other lines than the order's. A stock outcome waits for the order's payment success:
inventory answers only a paid order, so before it the outcome is either overtaking its cause
(a retried delivery) or forged; it is retried (a ``TransientError``) and ends a dead letter if
the payment never comes, and never confirms an order whose payment never succeeded.

An orchestrated order (``saga_style``) is decided by the orchestrator's commands instead
(``order_*_as_ordered``): the participants' events about it are the orchestrator's replies,
not orders' to act on, and are left alone here.
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone
from reliable_messaging.api import TransientError, Turn, publish

from kernel.bulk import bulk_save
from orders.metrics import event_ignored_observed, saga_outcome_observed
from orders.models import Order, OrderLine

logger = logging.getLogger(__name__)

# The events the saga reads about its orders (names in its log lines and metric).
PAYMENT_SUCCEEDED, PAYMENT_FAILED = "payments.payment.succeeded", "payments.payment.failed"
STOCK_RESERVED, RESERVATION_FAILED = "inventory.stock.reserved", "inventory.stock.reservation_failed"


class OrderNotFound(Exception):
    def __init__(self, order_id: uuid.UUID):
        super().__init__(f"no order {order_id}")
        self.order_id = order_id


class InvalidOrderState(Exception):
    def __init__(self, order: Order):
        super().__init__(f"order {order.id} is {order.status}")
        self.order = order


def _ignore(order_id: uuid.UUID, event: str, reason: str) -> None:
    """What an ignored event leaves: a warning and ``orders_events_ignored_total``, once the
    decision commits (a batch that runs its handlers again does not report it twice)."""
    transaction.on_commit(
        lambda: logger.warning(
            "%s ignored, the saga cannot have caused it: %s", event, reason, extra={"order_id": str(order_id)}
        )
    )
    event_ignored_observed(event=event, reason=reason)


def _lock_known(order_id: uuid.UUID, event: str) -> Order | None:
    """The order, locked; None (ignored) if this context never had it, or if the orchestrator
    runs its saga (the event is a reply to the orchestrator's command)."""
    return _known(Order.objects.select_for_update().filter(pk=order_id).first(), order_id, event)


def _known(order: Order | None, order_id: uuid.UUID, event: str) -> Order | None:
    if order is None:
        _ignore(order_id, event, "unknown order")
    elif order.saga_style == Order.SagaStyle.ORCHESTRATION:
        logger.debug("%s left to the orchestrator: the order is orchestrated", event)
        return None
    return order


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


def _orchestrated(order: Order) -> dict:
    """What an order's end says of an orchestrated one, so the orchestrator stops its saga even
    when the end overtakes the creation (a retried delivery)."""
    return {"saga_style": order.saga_style} if order.saga_style == Order.SagaStyle.ORCHESTRATION else {}


@transaction.atomic(savepoint=False)
def order_payment_record(*, order_id: uuid.UUID, amount: Decimal, currency: str) -> None:
    """Note that the order's charge succeeded (once): its stock outcome may now decide it."""
    order = _lock_known(order_id, PAYMENT_SUCCEEDED)
    if _note_payment(order, order_id, amount, currency):
        order.save(update_fields=["paid_at", "updated_at"])


def _note_payment(order: Order | None, order_id: uuid.UUID, amount: Decimal, currency: str) -> bool:
    """``paid_at`` set on a known, locked order (the caller writes it); False if nothing changed."""
    if order is None:
        return False
    if (amount, currency) != (order.total, order.currency):
        _ignore(order_id, PAYMENT_SUCCEEDED, "not the order's total")
        return False
    if order.paid_at is not None:
        logger.info("payment success already noted")
        return False
    order.paid_at = timezone.now()
    return True


@dataclass(frozen=True)
class PaymentSucceeded:
    order_id: uuid.UUID
    amount: Decimal
    currency: str


@dataclass(frozen=True)
class StockReserved:
    order_id: uuid.UUID
    reserved: dict[str, int]


@transaction.atomic(savepoint=False)
def order_replies_apply(replies: list[PaymentSucceeded | StockReserved], *, turn: Turn) -> None:
    """``order_payment_record`` or ``order_confirm`` of each reply in turn (``turn(n)``: where the
    n-th one's work is done), as if one after another, with the orders locked (in id order),
    their lines read and the changed ones written once for all."""
    order_ids = sorted({reply.order_id for reply in replies})
    orders = {o.pk: o for o in Order.objects.select_for_update().filter(pk__in=order_ids).order_by("pk")}
    lines: dict[uuid.UUID, dict[str, int]] = {}
    for order_id, sku, quantity in OrderLine.objects.filter(order_id__in=orders).values_list(
        "order_id", "sku", "quantity"
    ):
        lines.setdefault(order_id, {})[sku] = quantity
    changed: dict[uuid.UUID, Order] = {}
    for n, reply in enumerate(replies):
        with turn(n):
            order = orders.get(reply.order_id)
            if isinstance(reply, PaymentSucceeded):
                order = _known(order, reply.order_id, PAYMENT_SUCCEEDED)
                if _note_payment(order, reply.order_id, reply.amount, reply.currency):
                    changed[order.pk] = order
            elif (order := _paid_pending(order, reply.order_id, STOCK_RESERVED)) is not None:
                if reply.reserved != lines.get(order.pk, {}):
                    _ignore(reply.order_id, STOCK_RESERVED, "not the order's lines")
                    continue
                _confirm_in_memory(order)
                changed[order.pk] = order
    bulk_save(changed.values(), ["paid_at", "status", "updated_at"])


def _lines_of(order: Order) -> dict[str, int]:
    return dict(OrderLine.objects.filter(order=order).values_list("sku", "quantity"))


def _lock_paid_pending(order_id: uuid.UUID, event: str) -> Order | None:
    """The order, locked, if a stock outcome may decide it: None if unknown or decided already."""
    return _paid_pending(Order.objects.select_for_update().filter(pk=order_id).first(), order_id, event)


def _paid_pending(order: Order | None, order_id: uuid.UUID, event: str) -> Order | None:
    if (order := _known(order, order_id, event)) is None:
        return None
    if order.status != Order.Status.PENDING:
        logger.info("%s ignored: order is already %s", event, order.status)
        return None
    if order.paid_at is None:
        raise TransientError(f"{event} before the order's payment succeeded here: later, or never if forged")
    return order


@transaction.atomic(savepoint=False)
def order_confirm(*, order_id: uuid.UUID, reserved: dict[str, int]) -> None:
    """Confirm a paid pending order whose lines were all reserved (``reserved``: SKU -> quantity)."""
    if (order := _lock_paid_pending(order_id, STOCK_RESERVED)) is None:
        return
    if reserved != _lines_of(order):
        _ignore(order_id, STOCK_RESERVED, "not the order's lines")
        return
    _confirm(order)


@transaction.atomic(savepoint=False)
def order_decline(*, order_id: uuid.UUID) -> None:
    """The charge was declined: fail the pending order (payments sends a decline or a success, never both)."""
    if (order := _lock_known(order_id, PAYMENT_FAILED)) is None:
        return
    if order.paid_at is not None:
        _ignore(order_id, PAYMENT_FAILED, "a decline after a success")
        return
    if order.status != Order.Status.PENDING:
        logger.info("failure (payment_declined) ignored: order is already %s", order.status)
        return
    _fail(order, Order.FailureReason.PAYMENT_DECLINED)


@transaction.atomic(savepoint=False)
def order_fail_out_of_stock(*, order_id: uuid.UUID) -> None:
    if (order := _lock_paid_pending(order_id, RESERVATION_FAILED)) is None:
        return
    _fail(order, Order.FailureReason.OUT_OF_STOCK)


def _confirm(order: Order) -> None:
    _confirm_in_memory(order)
    order.save(update_fields=["status", "updated_at"])


def _confirm_in_memory(order: Order) -> None:
    order.status = Order.Status.CONFIRMED
    saga_outcome_observed(order=order, previous_status=Order.Status.PENDING)
    _publish(order, "orders.order.confirmed", total=f"{order.total:.2f}", currency=order.currency)


def _fail(order: Order, reason: str) -> None:
    order.status, order.failure_reason = Order.Status.FAILED, reason
    order.save(update_fields=["status", "failure_reason", "updated_at"])
    saga_outcome_observed(order=order, previous_status=Order.Status.PENDING)
    _publish(order, "orders.order.failed", reason=reason, **_orchestrated(order))


@transaction.atomic(savepoint=False)
def order_confirm_as_ordered(*, order_id: uuid.UUID) -> None:
    """The orchestrator's saga completed (stock, charge, shipment): confirm the pending order."""
    if (order := _lock_orchestrated_pending(order_id, "orchestrator.order.confirm")) is None:
        return
    _confirm(order)


@transaction.atomic(savepoint=False)
def order_fail_as_ordered(*, order_id: uuid.UUID, reason: str) -> None:
    """The orchestrator's saga failed and compensated what it had done: fail the pending order."""
    if (order := _lock_orchestrated_pending(order_id, "orchestrator.order.fail")) is None:
        return
    _fail(order, reason)


def _lock_orchestrated_pending(order_id: uuid.UUID, command: str) -> Order | None:
    """The order, locked, if the orchestrator may decide it: ours, orchestrated and still pending."""
    order = Order.objects.select_for_update().filter(pk=order_id).first()
    if order is None or order.saga_style != Order.SagaStyle.ORCHESTRATION:
        _ignore(order_id, command, "unknown order" if order is None else "not an orchestrated order")
        return None
    if order.status != Order.Status.PENDING:
        logger.info("%s ignored: order is already %s", command, order.status)
        return None
    return order


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
    _publish(order, "orders.order.cancelled", previous_status=previous, **_orchestrated(order))
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
