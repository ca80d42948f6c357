"""Dead letters: messages a consumer could not handle, kept in the database until purged.

The consumer records them here; operators list, replay and purge them through the same
functions from the ``dead_letters`` command and the admin.
"""

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from messaging.models import DeadLetter

logger = logging.getLogger(__name__)

# Broker properties worth keeping (the headers are kept apart).
_KEPT_PROPERTIES = ("message_id", "correlation_id", "content_type", "content_encoding", "delivery_mode")


def dead_letter_record(
    *,
    consumer: str,
    body: bytes,
    properties: dict,
    headers: dict,
    routing_key: str,
    reason: str,
    error: str = "",
    traceback: str = "",
    attempts: int = 1,
    first_failed_at: datetime | None = None,
) -> DeadLetter:
    """Store a dead letter; the same message dead-lettered again updates its row."""
    now = timezone.now()
    message_id = str(properties.get("message_id") or "")
    fields = {
        "event_type": str(headers.get("event_type") or "")[:200],
        "routing_key": str(headers.get("x-original-routing-key") or routing_key or "")[:255],
        "correlation_id": str(properties.get("correlation_id") or "")[:255],
        "reason": reason[:100],
        "error": error,
        "traceback": traceback,
        "body": bytes(body),
        "headers": _json_safe(headers),
        "properties": {k: _json_safe(properties[k]) for k in _KEPT_PROPERTIES if properties.get(k) is not None},
        "last_failed_at": now,
    }
    with transaction.atomic():
        existing = (
            DeadLetter.objects.select_for_update().filter(consumer=consumer, message_id=message_id).first()
            if message_id
            else None
        )
        if existing:
            for name, value in fields.items():
                setattr(existing, name, value)
            existing.attempts += attempts
            existing.save()
            letter = existing
        else:
            letter = DeadLetter.objects.create(
                consumer=consumer,
                message_id=message_id,
                attempts=attempts,
                first_failed_at=first_failed_at or now,
                **fields,
            )
    logger.error(
        "dead letter: %s",
        reason,
        extra={
            "consumer": consumer,
            "message_id": message_id or "-",
            "event_type": fields["event_type"],
            "correlation_id": fields["correlation_id"],
            "dead_letter_id": letter.pk,
            "error": error[:500],
        },
    )
    return letter


def _json_safe(value):
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    if isinstance(value, datetime):
        return value.isoformat()
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
