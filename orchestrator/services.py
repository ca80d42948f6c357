"""The orchestrated saga (seed 001's ``OrderSagaOrchestrator``) as a definition on the bus's saga
engine (reliable_messaging.sagas, which keeps its state, version, history, step keys and
deadlines): stock first, then the charge, then the shipment; compensation in reverse (refund,
then release). A step unanswered after ``ORCHESTRATOR_STEP_ATTEMPTS`` sends, each
``ORCHESTRATOR_STEP_TIMEOUT`` apart, is given up: its undo sent at once, the steps done undone.
It never holds the payment token: payments keeps it from ``orders.order.created``, encrypted for
payments alone, and the charge command carries none.

Cancellation and orders' own deadline end an order from orders' side: the participants
compensate on ``orders.order.cancelled`` / ``failed`` as in the choreography, and the saga
stops (``ended_by_orders``), cancelling a shipment that orders' event cannot reach.
"""

import logging
import uuid
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from django.db import models, transaction
from reliable_messaging import sagas
from reliable_messaging.api import Turn
from reliable_messaging.sagas import Definition, Move, Step

from orchestrator.conf import setting

logger = logging.getLogger(__name__)
NAME = "order"


class Status(models.TextChoices):
    STARTED = sagas.STARTED
    RESERVING_INVENTORY = "reserving_inventory"
    PROCESSING_PAYMENT = "processing_payment"
    SHIPPING_ORDER = "shipping_order"
    COMPLETED = "completed"
    COMPENSATING_PAYMENT = "compensating_payment"
    COMPENSATING_INVENTORY = "compensating_inventory"
    FAILED = "failed"
    # orders ended the order itself: the participants compensate on orders' event
    ENDED_BY_ORDERS = "ended_by_orders"


S = Status


def order_saga() -> Definition:
    """The saga, its timing from the settings (read when the orchestrator is ready)."""
    forward = {"deadline": setting("ORCHESTRATOR_STEP_TIMEOUT"), "attempts": setting("ORCHESTRATOR_STEP_ATTEMPTS")}
    back = {"deadline": setting("ORCHESTRATOR_STEP_TIMEOUT"), "compensation": True}
    return Definition(
        name=NAME,
        version=1,
        start=S.RESERVING_INVENTORY,
        steps={
            S.RESERVING_INVENTORY: Step(
                "orchestrator.stock.reserve",
                "inventory",
                {
                    "inventory.stock.reserved": S.PROCESSING_PAYMENT,
                    "inventory.stock.reservation_failed": Move(S.FAILED, "out_of_stock"),
                },
                undo="orchestrator.stock.release",
                given_up=S.FAILED,
                **forward,
            ),
            S.PROCESSING_PAYMENT: Step(
                "orchestrator.payment.charge",
                "payments",
                {
                    "payments.payment.succeeded": S.SHIPPING_ORDER,
                    "payments.payment.failed": Move(S.COMPENSATING_INVENTORY, "payment_declined"),
                },
                undo="orchestrator.payment.refund",
                given_up=S.COMPENSATING_INVENTORY,
                **forward,
            ),
            S.SHIPPING_ORDER: Step(
                "orchestrator.shipment.create",
                "shipping",
                {
                    "shipping.shipment.created": S.COMPLETED,
                    "shipping.shipment.refused": Move(S.COMPENSATING_PAYMENT, "shipping_refused"),
                },
                undo="orchestrator.shipment.cancel",
                given_up=S.COMPENSATING_PAYMENT,
                **forward,
            ),
            S.COMPENSATING_PAYMENT: Step(
                "orchestrator.payment.refund",
                "payments",
                {"payments.payment.refunded": S.COMPENSATING_INVENTORY},
                **back,
            ),
            S.COMPENSATING_INVENTORY: Step(
                "orchestrator.stock.release", "inventory", {"inventory.stock.released": S.FAILED}, **back
            ),
        },
        ends={S.COMPLETED: "orchestrator.order.confirm", S.FAILED: "orchestrator.order.fail", S.ENDED_BY_ORDERS: ""},
        build=command_payload,
        key_field="order_id",
        deadline_event="orchestrator.step.deadline",
    )


def command_payload(command: str, order: dict[str, Any], reason: str) -> dict[str, Any]:
    """What a command says beyond the order's id and its step key (the engine adds those)."""
    if command == "orchestrator.stock.reserve":
        return {"items": [{"sku": i["sku"], "quantity": i["quantity"]} for i in order["items"]]}
    if command == "orchestrator.payment.charge":
        return {
            "amount": order["amount"],
            "currency": order["currency"],
            "items": order["items"],
        }
    if command == "orchestrator.shipment.create":
        return {"ship_to": order["ship_to"]}
    if command in ("orchestrator.payment.refund", "orchestrator.stock.release", "orchestrator.order.fail"):
        return {"reason": reason or "timeout"}
    if command == "orchestrator.shipment.cancel":
        return {"reason": reason or "cancelled"}
    return {}


@dataclass(frozen=True)
class NewSaga:
    order_id: uuid.UUID
    items: list[dict]  # [{sku, quantity, unit_price}]
    amount: Decimal
    currency: str
    ship_to: str


def saga_start(new: list[NewSaga], *, turn: Turn) -> None:
    """Start each order's saga and send its first command, in turn (``turn(n)``: where the n-th
    one's is sent); a second start changes nothing."""
    sagas.start(NAME, [(str(saga.order_id), _data(saga)) for saga in new], cause="orders.order.created", turn=turn)


def _data(new: NewSaga) -> dict[str, Any]:
    order = {**asdict(new), "amount": f"{new.amount:.2f}"}
    del order["order_id"]
    return order


def saga_reply(replies: list[sagas.Reply], *, turn: Turn) -> None:
    """Participants' replies, in turn: each moves its saga if its state expects it, else changes
    nothing. A reply's ``check(saga)`` returns why it cannot be the saga's own (e.g. another
    amount), or ""."""
    sagas.reply(NAME, replies, turn=turn)


def saga_step_deadline(*, order_id: uuid.UUID, step: str, attempt: int) -> None:
    sagas.deadline(NAME, str(order_id), step=step, attempt=attempt)


@transaction.atomic(savepoint=False)
def saga_order_ended(*, order_id: uuid.UUID, event_type: str, was_pending: bool, orchestrated: bool) -> None:
    """Orders cancelled or failed the order itself: stop. The participants compensate on orders'
    event; only a shipment made for a still-pending order is out of its reach (shipping cancels
    on its own only what a confirmed order had), so the saga cancels that one. An orchestrated
    order's end that overtook its creation leaves a tombstone: the saga never starts."""
    saga = sagas.instance_of(NAME, str(order_id))
    if saga is None and orchestrated:
        if sagas.tombstone(NAME, str(order_id), state=S.ENDED_BY_ORDERS):
            logger.info("%s before the order's creation: its saga will not start", event_type)
            return
        saga = sagas.instance_of(NAME, str(order_id))  # started meanwhile
    if saga is None:
        return  # a choreographed order
    if saga.state in (S.FAILED, S.ENDED_BY_ORDERS) or (saga.state == S.COMPLETED and not was_pending):
        return  # over; a confirmed order's cancellation: shipping cancels its parcel itself
    shipment_made = saga.state in (S.SHIPPING_ORDER, S.COMPLETED)
    undo = ("orchestrator.shipment.cancel",) if shipment_made else ()
    sagas.stop(saga, to=S.ENDED_BY_ORDERS, cause=event_type, undo=undo)
