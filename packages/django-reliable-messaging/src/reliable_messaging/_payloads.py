"""Reading a payload's fields the one way every handler does: an unusable field is an
``InvalidPayload`` (a dead letter at once, never retried) naming the field."""

import uuid

from reliable_messaging._dispatch import InvalidPayload
from reliable_messaging._envelope import IncomingEvent


def payload_uuid(event: IncomingEvent, field: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(event.payload[field]))
    except (KeyError, ValueError) as exc:
        raise InvalidPayload(f"{field} missing or not a UUID: {exc}") from None
