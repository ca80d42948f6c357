"""Inventory's own reader of the payloads it receives (it imports no other context)."""

import uuid
from dataclasses import dataclass

from reliable_messaging.api import IncomingEvent, InvalidPayload, payload_uuid


@dataclass(frozen=True)
class Line:
    sku: str
    quantity: int


def order_id_of(event: IncomingEvent) -> uuid.UUID:
    return payload_uuid(event, "order_id")


def lines_of(event: IncomingEvent) -> list[Line]:
    items = event.payload.get("items")
    if not isinstance(items, list) or not items:
        raise InvalidPayload("items must be a non-empty list")
    lines = []
    for item in items:
        try:
            sku, quantity = item["sku"], item["quantity"]
        except (KeyError, TypeError):
            raise InvalidPayload(f"item without sku or quantity: {item!r}") from None
        if not isinstance(sku, str) or not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
            raise InvalidPayload(f"invalid item: {item!r}")
        lines.append(Line(sku, quantity))
    return lines
