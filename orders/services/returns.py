"""The return saga: a customer returns a confirmed order, as a definition on the bus's saga engine
(reliable_messaging.sagas). Orders hosts it: it owns the order and the endpoint that starts it,
and it is installed in every deployment (the orchestrator only where ORCHESTRATOR is on), so a
return runs alike whichever style the order was placed in.

Forward: shipping books the pickup (or stops a parcel not yet dispatched), inventory restocks
the order's lines, payments refunds the captured charge. A refund payments refuses (it holds no
charge to refund) compensates in reverse: the stock taken back out, the pickup cancelled; the
order is CONFIRMED again and ``orders.order.return_refused`` says why. A refund is never given
up (the money is owed once the gateway worker has it, payments/gateway_calls.py): its step is
sent again at each deadline until answered, as a compensation is.
"""

import uuid
from typing import Any

from django.db import models, transaction
from reliable_messaging import sagas
from reliable_messaging.sagas import Definition, Move, SagaInstance, Step

from orders.conf import setting
from orders.models import Order
from orders.services.saga import InvalidOrderState, _lock_order, _publish

NAME = "return"
DEADLINE_EVENT = "orders.return.deadline"


class ReturnState(models.TextChoices):
    STARTED = sagas.STARTED
    BOOKING_PICKUP = "booking_pickup"
    RESTOCKING = "restocking"
    REFUNDING = "refunding"
    RETURNED = "returned"
    TAKING_BACK_STOCK = "taking_back_stock"
    CANCELLING_PICKUP = "cancelling_pickup"
    NOT_RETURNED = "not_returned"


R = ReturnState


class ReturnedOnce(Exception):
    """An order has one return saga (keyed by its id): once its return was refused, not another."""

    def __init__(self, order: Order):
        super().__init__(f"order {order.id} had its return refused already")
        self.order = order


def return_saga() -> Definition:
    """The saga, its timing from orders' settings (read when orders is ready)."""
    forward = {"deadline": setting("RETURN_STEP_TIMEOUT"), "attempts": setting("RETURN_STEP_ATTEMPTS")}
    back = {"deadline": setting("RETURN_STEP_TIMEOUT"), "compensation": True}
    return Definition(
        name=NAME,
        version=1,
        start=R.BOOKING_PICKUP,
        steps={
            R.BOOKING_PICKUP: Step(
                "orders.return.book_pickup",
                "shipping",
                {"shipping.shipment.return_requested": R.RESTOCKING, "shipping.shipment.cancelled": R.RESTOCKING},
                undo="orders.return.cancel_pickup",
                given_up=R.NOT_RETURNED,
                **forward,
            ),
            R.RESTOCKING: Step(
                "orders.return.restock",
                "inventory",
                {"inventory.stock.restocked": R.REFUNDING},
                undo="orders.return.take_back_stock",
                given_up=R.CANCELLING_PICKUP,
                **forward,
            ),
            R.REFUNDING: Step(
                "orders.return.refund",
                "payments",
                {
                    "payments.payment.refunded": R.RETURNED,
                    "payments.refund.refused": Move(R.TAKING_BACK_STOCK, "refund_refused"),
                },
                **back,  # never given up: see the module's docstring
            ),
            R.TAKING_BACK_STOCK: Step(
                "orders.return.take_back_stock",
                "inventory",
                {"inventory.stock.taken_back": R.CANCELLING_PICKUP},
                **back,
            ),
            R.CANCELLING_PICKUP: Step(
                "orders.return.cancel_pickup",
                "shipping",
                {"shipping.shipment.reinstated": R.NOT_RETURNED},
                **back,
            ),
        },
        ends={R.RETURNED: "", R.NOT_RETURNED: ""},
        build=command_payload,
        key_field="order_id",
        deadline_event=DEADLINE_EVENT,
    )


def command_payload(command: str, order: dict[str, Any], reason: str) -> dict[str, Any]:
    """What a command says beyond the order's id and its step key (the engine adds those): inventory
    restocks what it reserved for the order, shipping knows its parcel."""
    if command == "orders.return.refund":
        return {"amount": order["amount"], "currency": order["currency"]}
    return {}


@transaction.atomic(savepoint=False)
def order_return(*, order_id: uuid.UUID) -> Order:
    """Start the return of a confirmed order: RETURNING, its saga started in the same transaction.
    Any other state (RETURNING or RETURNED included) is refused and changes nothing, and so is a
    second return of an order whose first was refused (the saga is the order's, by its id)."""
    order = _lock_order(order_id)
    if order.status != Order.Status.CONFIRMED:
        raise InvalidOrderState(order)
    if sagas.instance_of(NAME, str(order.id)) is not None:
        raise ReturnedOnce(order)
    order.status = Order.Status.RETURNING
    order.save(update_fields=["status", "updated_at"])
    _publish(order, "orders.order.return_requested")
    data = {"amount": f"{order.total:.2f}", "currency": order.currency}
    sagas.start(NAME, [(str(order.id), data)], cause="orders.order.return_requested")
    return order


@transaction.atomic(savepoint=False)
def return_reply(*, order_id: uuid.UUID, event_type: str, check: sagas.Check | None = None) -> None:
    """A participant's reply: moves the return if its step expects it (any other event about the
    order, such as a cancellation's, changes nothing), and settles the order once it ends."""
    _settle(sagas.reply(NAME, [sagas.Reply(str(order_id), event_type, check)])[0])


@transaction.atomic(savepoint=False)
def return_step_deadline(*, order_id: uuid.UUID, step: str, attempt: int) -> None:
    sagas.deadline(NAME, str(order_id), step=step, attempt=attempt)
    _settle(sagas.instance_of(NAME, str(order_id)))


def _settle(saga: SagaInstance | None) -> None:
    """The order of a return that just ended: RETURNED, or CONFIRMED again with the reason."""
    if saga is None or saga.state not in (R.RETURNED, R.NOT_RETURNED):
        return
    order = Order.objects.select_for_update().get(pk=saga.key)
    if order.status != Order.Status.RETURNING:
        return  # settled already
    if saga.state == R.RETURNED:
        order.status = Order.Status.RETURNED
        order.save(update_fields=["status", "updated_at"])
        _publish(order, "orders.order.returned", amount=saga.data["amount"], currency=saga.data["currency"])
    else:
        order.status = Order.Status.CONFIRMED
        order.save(update_fields=["status", "updated_at"])
        _publish(order, "orders.order.return_refused", reason=saga.failure_reason or "timeout")
