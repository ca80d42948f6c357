"""Payments' own reader of the payloads it receives (it imports no other context)."""

import uuid
from decimal import Decimal, InvalidOperation

from messaging.api import IncomingEvent, InvalidPayload, payload_uuid


def order_id_of(event: IncomingEvent) -> uuid.UUID:
    return payload_uuid(event, "order_id")


def amount_of(event: IncomingEvent) -> Decimal:
    try:
        amount = Decimal(str(event.payload["total"]))
    except (KeyError, InvalidOperation):
        raise InvalidPayload("total missing or not a decimal") from None
    if amount <= 0:
        raise InvalidPayload(f"total must be positive, not {amount}")
    return amount


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
