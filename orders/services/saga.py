"""The order's side of the saga: a table of transitions (``SAGA``: stage, event -> what follows),
each publishing its outcome.

A transition applies only from the stage it expects; an event that no longer applies (late,
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

import enum
import logging
import uuid
from collections.abc import Callable
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


def _confirmed(order: Order) -> None:
    """A pending order confirmed, in memory (the caller writes it), and its event."""
    order.status = Order.Status.CONFIRMED
    saga_outcome_observed(order=order, previous_status=Order.Status.PENDING)
    _publish(order, "orders.order.confirmed", total=f"{order.total:.2f}", currency=order.currency)


def _failed(order: Order, reason: str) -> None:
    """A pending order failed, in memory (the caller writes it), and its event."""
    order.status, order.failure_reason = Order.Status.FAILED, reason
    saga_outcome_observed(order=order, previous_status=Order.Status.PENDING)
    _publish(order, "orders.order.failed", reason=reason, **_orchestrated(order))


# --- the choreographed saga, as a table ------------------------------------------------------------
@dataclass(frozen=True)
class SagaEvent:
    """An event of the choreographed saga about one of orders' orders, as its handler read it."""

    order_id: uuid.UUID
    event_type: str
    charged: tuple[Decimal, str] | None = None  # a payment success's amount and currency
    reserved: dict[str, int] | None = None  # a reservation's lines: SKU -> quantity


class Stage(enum.Enum):
    """Where a choreographed order stands for its saga's events: pending or ended (its status),
    its payment success noted here or not (``paid_at``)."""

    PENDING = "pending"
    PAID = "paid"
    ENDED = "ended"
    ENDED_PAID = "ended, paid"


def stage_of(order: Order) -> Stage:
    if order.status == Order.Status.PENDING:
        return Stage.PENDING if order.paid_at is None else Stage.PAID
    return Stage.ENDED if order.paid_at is None else Stage.ENDED_PAID


# Why an event cannot be the saga's own ("" if it can): given the order and its lines.
Check = Callable[[Order, SagaEvent, dict[str, int]], str]


def _charged_total(order: Order, event: SagaEvent, lines: dict[str, int]) -> str:
    return "" if event.charged == (order.total, order.currency) else "not the order's total"


def _reserved_lines(order: Order, event: SagaEvent, lines: dict[str, int]) -> str:
    return "" if event.reserved == lines else "not the order's lines"


@dataclass(frozen=True)
class Move:
    """The order moves to ``to``: ``effect`` changes it in memory (its run writes it) and
    publishes what follows; unless ``check`` refuses the event first."""

    to: Stage
    effect: Callable[[Order], None]
    check: Check | None = None


@dataclass(frozen=True)
class Stay:
    """Late or repeated: nothing changes, ``said`` is logged; unless ``check`` refuses it first."""

    said: str
    check: Check | None = None


@dataclass(frozen=True)
class Refuse:
    """The saga cannot have caused it (``_ignore``)."""

    reason: str


@dataclass(frozen=True)
class Wait:
    """Not yet: a stock outcome before the payment's success, retried (``TransientError``)."""


def _note_payment(order: Order) -> None:
    order.paid_at = timezone.now()


def _decline(order: Order) -> None:
    _failed(order, Order.FailureReason.PAYMENT_DECLINED)


def _out_of_stock(order: Order) -> None:
    _failed(order, Order.FailureReason.OUT_OF_STOCK)


STALE = Stay("{event} ignored: order is already {status}")
NOTED = Stay("payment success already noted", check=_charged_total)
AFTER_SUCCESS = Refuse("a decline after a success")
WAIT_FOR_PAYMENT = Wait()

# (stage, event) -> what follows. A payment success is noted once, even on an ended order (payments
# refunds it on the end); payments sends a decline or a success, never both; inventory answers only
# a paid order, so a stock outcome waits for the payment and then decides a pending order.
SAGA: dict[tuple[Stage, str], Move | Stay | Refuse | Wait] = {
    (Stage.PENDING, PAYMENT_SUCCEEDED): Move(Stage.PAID, _note_payment, check=_charged_total),
    (Stage.PAID, PAYMENT_SUCCEEDED): NOTED,
    (Stage.ENDED, PAYMENT_SUCCEEDED): Move(Stage.ENDED_PAID, _note_payment, check=_charged_total),
    (Stage.ENDED_PAID, PAYMENT_SUCCEEDED): NOTED,
    (Stage.PENDING, PAYMENT_FAILED): Move(Stage.ENDED, _decline),
    (Stage.PAID, PAYMENT_FAILED): AFTER_SUCCESS,
    (Stage.ENDED, PAYMENT_FAILED): Stay("failure (payment_declined) ignored: order is already {status}"),
    (Stage.ENDED_PAID, PAYMENT_FAILED): AFTER_SUCCESS,
    (Stage.PENDING, STOCK_RESERVED): WAIT_FOR_PAYMENT,
    (Stage.PAID, STOCK_RESERVED): Move(Stage.ENDED_PAID, _confirmed, check=_reserved_lines),
    (Stage.ENDED, STOCK_RESERVED): STALE,
    (Stage.ENDED_PAID, STOCK_RESERVED): STALE,
    (Stage.PENDING, RESERVATION_FAILED): WAIT_FOR_PAYMENT,
    (Stage.PAID, RESERVATION_FAILED): Move(Stage.ENDED_PAID, _out_of_stock),
    (Stage.ENDED, RESERVATION_FAILED): STALE,
    (Stage.ENDED_PAID, RESERVATION_FAILED): STALE,
}
# What a run writes of the orders it changed.
CHANGED_FIELDS = ["paid_at", "status", "failure_reason", "updated_at"]


@transaction.atomic(savepoint=False)
def order_saga_apply(events: list[SagaEvent], *, turn: Turn) -> None:
    """Each event as ``SAGA`` says, in turn (``turn(n)``: where the n-th one's work is done), as
    if one after another, with the orders locked (in id order), the lines a reservation is
    checked against read, and the changed orders written once for all."""
    order_ids = sorted({event.order_id for event in events})
    orders = {o.pk: o for o in Order.objects.select_for_update().filter(pk__in=order_ids).order_by("pk")}
    lines: dict[uuid.UUID, dict[str, int]] = {}
    reserved = {event.order_id for event in events if event.event_type == STOCK_RESERVED}
    for order_id, sku, quantity in OrderLine.objects.filter(order_id__in=reserved & orders.keys()).values_list(
        "order_id", "sku", "quantity"
    ):
        lines.setdefault(order_id, {})[sku] = quantity
    changed: dict[uuid.UUID, Order] = {}
    for n, event in enumerate(events):
        with turn(n):
            order = orders.get(event.order_id)
            if order is None:
                _ignore(event.order_id, event.event_type, "unknown order")
            elif order.saga_style == Order.SagaStyle.ORCHESTRATION:  # a reply to the orchestrator's command
                logger.debug("%s left to the orchestrator: the order is orchestrated", event.event_type)
            elif _follow(order, event, lines.get(order.pk, {})):
                changed[order.pk] = order
    bulk_save(changed.values(), CHANGED_FIELDS)


def _follow(order: Order, event: SagaEvent, lines: dict[str, int]) -> bool:
    """What ``SAGA`` says ``event`` does to ``order``; True if it changed it."""
    rule = SAGA[stage_of(order), event.event_type]
    if isinstance(rule, Wait):
        raise TransientError(f"{event.event_type} before the order's payment succeeded here: later, or never if forged")
    if isinstance(rule, Refuse):
        _ignore(order.pk, event.event_type, rule.reason)
        return False
    if rule.check is not None and (refused := rule.check(order, event, lines)):
        _ignore(order.pk, event.event_type, refused)
        return False
    if isinstance(rule, Stay):
        logger.info("%s", rule.said.format(event=event.event_type, status=order.status))
        return False
    rule.effect(order)
    return True


CONFIRM_ORDERED, FAIL_ORDERED = "orchestrator.order.confirm", "orchestrator.order.fail"


@transaction.atomic(savepoint=False)
def order_end_as_ordered(ends: list[tuple[uuid.UUID, str, str]], *, turn: Turn) -> None:
    """The orchestrator's end of each (order id, command, reason) in turn (``turn(n)``: where the
    n-th one's work is done), as if one after another: its saga completed (stock, charge,
    shipment; ``CONFIRM_ORDERED``) or failed and compensated what it had done (``FAIL_ORDERED``,
    with the reason). Only an orchestrated order still pending ends so. The orders locked (in id
    order) and written once for all."""
    order_ids = sorted({order_id for order_id, _, _ in ends})
    orders = {o.pk: o for o in Order.objects.select_for_update().filter(pk__in=order_ids).order_by("pk")}
    changed: dict[uuid.UUID, Order] = {}
    for n, (order_id, command, reason) in enumerate(ends):
        with turn(n):
            order = orders.get(order_id)
            if order is None or order.saga_style != Order.SagaStyle.ORCHESTRATION:
                _ignore(order_id, command, "unknown order" if order is None else "not an orchestrated order")
            elif order.status != Order.Status.PENDING:
                logger.info("%s ignored: order is already %s", command, order.status)
            else:
                _confirmed(order) if command == CONFIRM_ORDERED else _failed(order, reason)
                changed[order.pk] = order
    bulk_save(changed.values(), CHANGED_FIELDS)


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
                _failed(order, Order.FailureReason.TIMEOUT)
            bulk_save(batch, CHANGED_FIELDS)
        expired += len(batch)
        if len(batch) < batch_size:
            return expired
