"""The orchestrated saga (seed 001's ``OrderSagaOrchestrator``): stock first, then the charge,
then the shipment; compensation in reverse (refund, then release).

Each state that waits for a participant sends that participant one command through the outbox,
with the step's idempotency key (made once, sent again on a retry) and a deadline: a scheduled
``orchestrator.step.deadline`` cancelled when the reply comes. A reply moves the saga only from
the state that expects it (``REPLIES``); anything else (a duplicate, a late or reordered reply)
changes nothing. Every move checks and bumps ``version`` in one conditional UPDATE: a handler
that lost the race raises ``TransientError`` and its message is read again.

A step with no reply after ``ORCHESTRATOR_STEP_ATTEMPTS`` sends is given up and compensated: its
own undo is sent without waiting (the participant's undo is idempotent and safe before or after
the step), then the steps known done are undone in reverse, each waiting for its reply. A
compensation is sent again at each deadline until it is answered (or orders ends the order).

Cancellation and orders' own deadline end an order from orders' side: the participants
compensate on ``orders.order.cancelled`` / ``failed`` as in the choreography, and the saga
stops (``ended_by_orders``), cancelling a shipment that orders' event cannot reach.
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from reliable_messaging.api import TransientError, cancel_scheduled, publish

from orchestrator.conf import setting
from orchestrator.models import OrderSaga, SagaTransition

logger = logging.getLogger(__name__)
Status = OrderSaga.Status

DEADLINE = "orchestrator.step.deadline"
ACTIVE = (
    Status.RESERVING_INVENTORY,
    Status.PROCESSING_PAYMENT,
    Status.SHIPPING_ORDER,
    Status.COMPENSATING_PAYMENT,
    Status.COMPENSATING_INVENTORY,
)


@dataclass(frozen=True)
class Step:
    command: str
    key: str  # its entry in ``step_keys``
    compensation: bool = False


# The state waiting for a participant -> the command it sends.
STEPS = {
    Status.RESERVING_INVENTORY: Step("orchestrator.stock.reserve", "inventory"),
    Status.PROCESSING_PAYMENT: Step("orchestrator.payment.charge", "payment"),
    Status.SHIPPING_ORDER: Step("orchestrator.shipment.create", "shipping"),
    Status.COMPENSATING_PAYMENT: Step("orchestrator.payment.refund", "refund", compensation=True),
    Status.COMPENSATING_INVENTORY: Step("orchestrator.stock.release", "release", compensation=True),
}

# (reply, the state expecting it) -> (the next state, the failure it means, if any).
REPLIES = {
    ("inventory.stock.reserved", Status.RESERVING_INVENTORY): (Status.PROCESSING_PAYMENT, ""),
    ("inventory.stock.reservation_failed", Status.RESERVING_INVENTORY): (Status.FAILED, "out_of_stock"),
    ("payments.payment.succeeded", Status.PROCESSING_PAYMENT): (Status.SHIPPING_ORDER, ""),
    ("payments.payment.failed", Status.PROCESSING_PAYMENT): (Status.COMPENSATING_INVENTORY, "payment_declined"),
    ("shipping.shipment.created", Status.SHIPPING_ORDER): (Status.COMPLETED, ""),
    ("shipping.shipment.refused", Status.SHIPPING_ORDER): (Status.COMPENSATING_PAYMENT, "shipping_refused"),
    ("payments.payment.refunded", Status.COMPENSATING_PAYMENT): (Status.COMPENSATING_INVENTORY, ""),
    ("inventory.stock.released", Status.COMPENSATING_INVENTORY): (Status.FAILED, ""),
}

# A forward step given up: what undoes it at once (unanswered), and where compensation goes on.
GIVE_UP = {
    Status.RESERVING_INVENTORY: ("orchestrator.stock.release", Status.FAILED),
    Status.PROCESSING_PAYMENT: ("orchestrator.payment.refund", Status.COMPENSATING_INVENTORY),
    Status.SHIPPING_ORDER: ("orchestrator.shipment.cancel", Status.COMPENSATING_PAYMENT),
}


@dataclass(frozen=True)
class NewSaga:
    order_id: uuid.UUID
    items: list[dict]  # [{sku, quantity, unit_price}]
    amount: Decimal
    currency: str
    payment_token: str
    ship_to: str


@transaction.atomic(savepoint=False)
def saga_start(new: NewSaga) -> None:
    """Start the order's saga and send its first command; a second start changes nothing."""
    keys = {step.key: str(uuid.uuid4()) for step in STEPS.values()}
    OrderSaga.objects.bulk_create(
        [
            OrderSaga(
                order_id=new.order_id,
                step_keys=keys,
                items=new.items,
                amount=new.amount,
                currency=new.currency,
                payment_token=new.payment_token,
                ship_to=new.ship_to,
            )
        ],
        ignore_conflicts=True,
    )
    saga = OrderSaga.objects.get(order_id=new.order_id)
    if saga.status != Status.STARTED or saga.version != 1:
        logger.info("saga already started: %s", saga.status)
        return
    _move(saga, Status.RESERVING_INVENTORY, cause="orders.order.created")


@transaction.atomic(savepoint=False)
def saga_reply(*, order_id: uuid.UUID, event_type: str, check=None) -> None:
    """A participant's reply: move the saga if its state expects it, else change nothing.
    ``check(saga)`` returns why a reply cannot be the saga's own (e.g. another amount), or ""."""
    saga = OrderSaga.objects.filter(order_id=order_id).first()
    if saga is None:
        return  # a choreographed order's event: not the orchestrator's
    move = REPLIES.get((event_type, saga.status))
    if move is None:
        logger.info("%s ignored: the saga is %s", event_type, saga.status, extra={"order_id": str(order_id)})
        return
    if check is not None and (problem := check(saga)):
        logger.warning("%s ignored, not this saga's: %s", event_type, problem, extra={"order_id": str(order_id)})
        return
    to, reason = move
    _move(saga, to, cause=event_type, reason=reason)


@transaction.atomic(savepoint=False)
def saga_step_deadline(*, order_id: uuid.UUID, step: str, attempt: int) -> None:
    """A step's deadline: if that step still waits with that attempt, send it again or give up."""
    saga = OrderSaga.objects.filter(order_id=order_id).first()
    if saga is None or saga.status != step or saga.attempt != attempt:
        return  # answered meanwhile, or an older attempt's deadline
    cause = f"{DEADLINE} (attempt {attempt})"
    if STEPS[saga.status].compensation or attempt < setting("ORCHESTRATOR_STEP_ATTEMPTS"):
        _move(saga, saga.status, cause=cause)  # the same command, the same key, one attempt more
        return
    undo, then = GIVE_UP[saga.status]
    undo_key = next((s.key for s in STEPS.values() if s.command == undo), STEPS[saga.status].key)
    _send(saga, undo, key=undo_key, reason="timeout")
    _move(saga, then, cause=cause, reason="timeout")


@transaction.atomic(savepoint=False)
def saga_order_ended(*, order_id: uuid.UUID, event_type: str, was_pending: bool, orchestrated: bool) -> None:
    """Orders cancelled or failed the order itself: stop. The participants compensate on orders'
    event; only a shipment made for a still-pending order is out of its reach (shipping cancels
    on its own only what a confirmed order had), so the saga cancels that one. An orchestrated
    order's end that overtook its creation leaves a tombstone: the saga never starts."""
    saga = OrderSaga.objects.filter(order_id=order_id).first()
    if saga is None and orchestrated:
        tombstone = OrderSaga(order_id=order_id, status=Status.ENDED_BY_ORDERS, amount=Decimal("0"), currency="")
        OrderSaga.objects.bulk_create([tombstone], ignore_conflicts=True)
        saga = OrderSaga.objects.get(order_id=order_id)
        if saga.status == Status.ENDED_BY_ORDERS:
            logger.info("%s before the order's creation: its saga will not start", event_type)
            return
    if saga is None or saga.status in (Status.FAILED, Status.ENDED_BY_ORDERS):
        return
    shipment_made = saga.status in (Status.SHIPPING_ORDER, Status.COMPLETED)
    if saga.status == Status.COMPLETED and not was_pending:
        return  # a confirmed order's cancellation: shipping cancels its parcel itself
    if shipment_made:
        _send(saga, "orchestrator.shipment.cancel", key=STEPS[Status.SHIPPING_ORDER].key, reason="cancelled")
    _move(saga, Status.ENDED_BY_ORDERS, cause=event_type)


# --- moves ------------------------------------------------------------------------------------
def _move(saga: OrderSaga, to: str, *, cause: str, reason: str = "") -> None:
    """Move ``saga`` to ``to`` if nobody moved it since it was read, and do what ``to`` does:
    send its step's command (with a new deadline), or tell orders the outcome."""
    if saga.deadline_id is not None:
        cancel_scheduled(saga.deadline_id)
    attempt = saga.attempt + 1 if to == saga.status else (1 if to in STEPS else 0)
    reason = saga.failure_reason or reason
    changes = {"status": to, "attempt": attempt, "deadline_id": None, "failure_reason": reason}
    if to not in (Status.STARTED, Status.RESERVING_INVENTORY, Status.PROCESSING_PAYMENT):
        changes["payment_token"] = ""  # kept only while a charge may still be sent
    if to in STEPS:
        changes["deadline_id"] = _send_step(saga, to, attempt=attempt, reason=reason)
    elif to == Status.COMPLETED:
        _send(saga, "orchestrator.order.confirm")
    elif to == Status.FAILED:
        _send(saga, "orchestrator.order.fail", reason=reason or "timeout")
    now = timezone.now()
    if to != saga.status:
        changes["step_since"] = now
    moved = OrderSaga.objects.filter(pk=saga.pk, version=saga.version).update(
        **changes, version=F("version") + 1, updated_at=now
    )
    if moved != 1:
        raise TransientError(f"the saga of {saga.order_id} moved meanwhile (version {saga.version}): read it again")
    SagaTransition.objects.create(
        saga=saga, from_status=saga.status, to_status=to, cause=cause[:255], version=saga.version + 1
    )
    for name, value in changes.items():
        setattr(saga, name, value)
    saga.version += 1


def _send_step(saga: OrderSaga, state: str, *, attempt: int, reason: str) -> uuid.UUID:
    """The step's command, then its deadline (scheduled); the deadline's id, to cancel it."""
    step = STEPS[state]
    _send(saga, step.command, key=step.key, reason=reason)
    deliver_at = timezone.now() + timedelta(seconds=setting("ORCHESTRATOR_STEP_TIMEOUT"))
    return publish(
        event_type=DEADLINE,
        aggregate_type="order_saga",
        aggregate_id=str(saga.order_id),
        correlation_id=str(saga.order_id),
        deliver_at=deliver_at,
        payload={"order_id": str(saga.order_id), "step": state, "attempt": attempt},
    )


def _send(saga: OrderSaga, command: str, *, key: str = "", reason: str = "") -> None:
    """One command, addressed by its routing key to the one context that obeys it; ``key`` names
    the step whose idempotency key it carries."""
    payload = {"order_id": str(saga.order_id)}
    if key:
        payload["key"] = saga.step_keys[key]
    if command == "orchestrator.stock.reserve":
        payload["items"] = [{"sku": i["sku"], "quantity": i["quantity"]} for i in saga.items]
    elif command == "orchestrator.payment.charge":
        payload |= {
            "amount": f"{saga.amount:.2f}",
            "currency": saga.currency,
            "payment_token": saga.payment_token,
            "items": saga.items,
        }
    elif command == "orchestrator.shipment.create":
        payload["ship_to"] = saga.ship_to
    elif command in ("orchestrator.payment.refund", "orchestrator.stock.release", "orchestrator.order.fail"):
        payload["reason"] = reason or "timeout"
    elif command == "orchestrator.shipment.cancel":
        payload["reason"] = reason or "cancelled"
    publish(
        event_type=command,
        aggregate_type="order_saga",
        aggregate_id=str(saga.order_id),
        correlation_id=str(saga.order_id),
        payload=payload,
    )
