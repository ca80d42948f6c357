"""Orders' own reader of the payloads it receives (it imports no other context)."""

import uuid
from decimal import Decimal, InvalidOperation

from messaging.api import IncomingEvent, InvalidPayload, payload_uuid


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
    return update
