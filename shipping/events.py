"""Shipping's own reader of the payloads it receives (it imports no other context)."""

import uuid

from reliable_messaging.api import IncomingEvent, InvalidPayload, payload_uuid


def order_id_of(event: IncomingEvent) -> uuid.UUID:
    return payload_uuid(event, "order_id")


def was_confirmed(event: IncomingEvent) -> bool:
    """Whether a cancelled order had been confirmed (orders sends ``previous_status``); when it
    does not say, assume it was, so that a late confirmation cannot prepare a parcel."""
    previous = event.payload.get("previous_status", "CONFIRMED")
    if previous not in ("PENDING", "CONFIRMED"):
        raise InvalidPayload(f"previous_status must be PENDING or CONFIRMED, not {previous!r}")
    return previous == "CONFIRMED"


def ship_to_of(event: IncomingEvent) -> str:
    ship_to = event.payload.get("ship_to", "")
    if not isinstance(ship_to, str) or not (ship_to == "" or (len(ship_to) == 2 and ship_to.isalpha())):
        raise InvalidPayload(f"ship_to must be an ISO 3166 country code or empty, not {ship_to!r}")
    return ship_to
