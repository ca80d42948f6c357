"""The orchestrator's own reader of the payloads it receives (it imports no other context)."""

import uuid
from decimal import Decimal, InvalidOperation

from reliable_messaging.api import IncomingEvent, InvalidPayload, payload_uuid

from orchestrator.services import NewSaga


def order_id_of(event: IncomingEvent) -> uuid.UUID:
    return payload_uuid(event, "order_id")


def is_orchestrated(event: IncomingEvent) -> bool:
    """Whether orders.order.created asks for the orchestrated saga (absent: the choreography)."""
    return event.payload.get("saga_style") == "orchestration"


def new_saga_of(event: IncomingEvent) -> NewSaga:
    """What the saga's commands need of orders.order.created v3 (its schema checked the shape). The
    payment token is not among them: it is encrypted for payments alone, which keeps it from the
    event itself until the charge command comes (docs/operations.md, "Security defaults")."""
    payload = event.payload
    try:
        items = [
            {"sku": i["sku"], "quantity": i["quantity"], "unit_price": i["unit_price"]["amount"]}
            for i in payload["items"]
        ]
        amount, currency = Decimal(payload["total"]["amount"]), payload["total"]["currency"]
    except (KeyError, TypeError, InvalidOperation):
        raise InvalidPayload("an order without its items or total") from None
    return NewSaga(order_id_of(event), items, amount, currency, payload.get("ship_to", ""))


def was_pending(event: IncomingEvent) -> bool:
    """Whether orders ended the order while it was pending (a failure always is)."""
    return event.payload.get("previous_status", "PENDING") == "PENDING"


def step_deadline_of(event: IncomingEvent) -> dict:
    step, attempt = event.payload.get("step"), event.payload.get("attempt")
    if not isinstance(step, str) or not isinstance(attempt, int) or isinstance(attempt, bool):
        raise InvalidPayload("a deadline names its step and attempt")
    return {"order_id": order_id_of(event), "step": step, "attempt": attempt}


def reply_check(event: IncomingEvent):
    """What a reply must agree with in the saga to be its own: a charge of the order's total, a
    reservation of its lines. Returns a check for ``saga_reply`` (None: nothing to check)."""
    payload = event.payload
    if event.event_type == "payments.payment.succeeded":
        charged = (str(payload.get("amount")), payload.get("currency"))
        return lambda saga: "" if charged == (saga.data["amount"], saga.data["currency"]) else f"a charge of {charged}"
    if event.event_type == "inventory.stock.reserved":
        reserved = sorted((i.get("sku"), i.get("quantity")) for i in payload.get("items", []) if isinstance(i, dict))
        return lambda saga: (
            "" if reserved == sorted((i["sku"], i["quantity"]) for i in saga.data["items"]) else "other lines reserved"
        )
    return None
