"""Payments' own reader of the payloads it receives (it imports no other context)."""

import uuid
from decimal import Decimal, InvalidOperation

from reliable_messaging.api import IncomingEvent, InvalidPayload, payload_uuid


def order_id_of(event: IncomingEvent) -> uuid.UUID:
    return payload_uuid(event, "order_id")


def is_orchestrated(event: IncomingEvent) -> bool:
    """Whether orders.order.created asks for the orchestrated saga: the orchestrator sends the
    charge as a command once the stock is reserved, and payments keeps the token until then."""
    return event.payload.get("saga_style") == "orchestration"


def total_of(event: IncomingEvent) -> tuple[Decimal, str]:
    """An order's total and its currency (orders.order.created v2: ``{"amount", "currency"}``)."""
    try:
        total = event.payload["total"]
        amount, currency = Decimal(str(total["amount"])), total["currency"]
    except (KeyError, TypeError, InvalidOperation):
        raise InvalidPayload("total missing or not an amount with its currency") from None
    if amount <= 0:
        raise InvalidPayload(f"total must be positive, not {amount}")
    return amount, currency


def amount_of(event: IncomingEvent) -> tuple[Decimal, str]:
    """The amount and currency of the orchestrator's charge command (its schema checked both)."""
    try:
        amount, currency = Decimal(str(event.payload["amount"])), event.payload["currency"]
    except (KeyError, InvalidOperation):
        raise InvalidPayload("a charge without its amount and currency") from None
    if amount <= 0:
        raise InvalidPayload(f"amount must be positive, not {amount}")
    return amount, currency


def lines_of(event: IncomingEvent) -> list[dict]:
    """An order's lines as payments.payment.succeeded v1 passes them on: sku, quantity and
    the unit price as a decimal string (the currency is the payment's)."""
    return [
        {"sku": item["sku"], "quantity": item["quantity"], "unit_price": item["unit_price"]["amount"]}
        for item in items_of(event)
    ]


def text_of(event: IncomingEvent, field: str) -> str:
    value = event.payload.get(field)
    if not isinstance(value, str) or not value:
        raise InvalidPayload(f"{field} missing or not a string")
    return value


def items_of(event: IncomingEvent) -> list:
    items = event.payload.get("items")
    if not isinstance(items, list) or not items:
        raise InvalidPayload("items must be a non-empty list")
    return items
