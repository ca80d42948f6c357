"""Orders' own reader of the payloads it receives (it imports no other context)."""

import uuid
from decimal import Decimal, InvalidOperation

from reliable_messaging.api import IncomingEvent, InvalidPayload, payload_uuid

from orders.models import Order, StorefrontProduct

INT_MAX, BIGINT_MAX = 2**31 - 1, 2**63 - 1  # PostgreSQL's integer and bigint


def order_id_of(event: IncomingEvent) -> uuid.UUID:
    return payload_uuid(event, "order_id")


def product_update_of(event: IncomingEvent) -> dict:
    payload = event.payload
    try:
        update = {
            "sku": payload["sku"],
            "name": payload["name"],
            "price": Decimal(str(payload["price"])),
            "available": payload["available"],
            "version": payload["version"],
        }
    except (KeyError, InvalidOperation) as exc:
        raise InvalidPayload(f"product update without a valid {exc}") from None
    if not isinstance(update["sku"], str) or not isinstance(update["name"], str):
        raise InvalidPayload("sku and name must be strings")
    for field in ("available", "version"):
        if not isinstance(update[field], int) or isinstance(update[field], bool):
            raise InvalidPayload(f"{field} must be an integer")
    if problem := _unstorable(update):
        raise InvalidPayload(f"product update the storefront cannot hold: {problem}")
    return update


def _unstorable(update: dict) -> str:
    """What StorefrontProduct's columns would refuse, refused here instead: a run of updates is
    applied in bulk with only each SKU's newest version written, so an older one the database
    would refuse must be caught before, as it would be alone ('' when storable)."""
    field = StorefrontProduct._meta.get_field
    whole_digits = field("price").max_digits - field("price").decimal_places
    if not 0 < len(update["sku"]) <= field("sku").max_length:
        return f"sku of {len(update['sku'])} characters"
    if len(update["name"]) > field("name").max_length:
        return f"name of {len(update['name'])} characters"
    price = update["price"]
    if not price.is_finite() or price < 0 or (price and price.adjusted() >= whole_digits):
        return f"price {price}"
    if not 0 <= update["available"] <= INT_MAX:
        return f"available {update['available']}"
    if not 0 <= update["version"] <= BIGINT_MAX:
        return f"version {update['version']}"
    return ""


def payment_of(event: IncomingEvent) -> dict:
    """A payment's amount and currency (payments.payment.succeeded v1; the schema checked both)."""
    try:
        return {"amount": Decimal(str(event.payload["amount"])), "currency": event.payload["currency"]}
    except (KeyError, InvalidOperation):
        raise InvalidPayload("payment without an amount and its currency") from None


def reserved_lines_of(event: IncomingEvent) -> dict[str, int]:
    """What inventory reserved, SKU -> quantity (a SKU twice: added up, as a mismatch would be)."""
    items = event.payload.get("items")
    if not isinstance(items, list):
        raise InvalidPayload("items must be a list")
    lines: dict[str, int] = {}
    for item in items:
        try:
            lines[item["sku"]] = lines.get(item["sku"], 0) + item["quantity"]
        except (KeyError, TypeError):
            raise InvalidPayload(f"item without sku or quantity: {item!r}") from None
    return lines


def failure_reason_of(event: IncomingEvent) -> str:
    """Why the orchestrator failed an order: one of the order's failure reasons."""
    reason = event.payload.get("reason")
    if reason not in Order.FailureReason.values:
        raise InvalidPayload(f"reason must be one of {Order.FailureReason.values}, not {reason!r}")
    return reason


def step_deadline_of(event: IncomingEvent) -> dict:
    """A return step's deadline (orders.return.deadline): the order, the step, the attempt."""
    step, attempt = event.payload.get("step"), event.payload.get("attempt")
    if not isinstance(step, str) or not isinstance(attempt, int) or isinstance(attempt, bool):
        raise InvalidPayload("a deadline names its step and attempt")
    return {"order_id": order_id_of(event), "step": step, "attempt": attempt}


def refund_check(event: IncomingEvent):
    """A refund is the return's own only for the amount it asked (a cancellation's refund is
    never the return's: a returning order cannot be cancelled). None: nothing to check."""
    if event.event_type != "payments.payment.refunded":
        return None
    refunded = (str(event.payload.get("amount")), event.payload.get("currency"))
    return lambda saga: "" if refunded == (saga.data["amount"], saga.data["currency"]) else f"a refund of {refunded}"
