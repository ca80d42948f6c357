"""Dead letters: messages a consumer could not handle, kept in the database until purged.

The consumer records them here; operators list, replay and purge them through the same
functions from the ``dead_letters`` command and the admin.
"""

import json
import logging
import math
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from reliable_messaging import _broker as broker
from reliable_messaging._conf import duration, queue_name, setting
from reliable_messaging._edge import MAX_COUNT, clamped_count
from reliable_messaging._envelope import ATTEMPT_HEADER, Envelope
from reliable_messaging._masking import mask_sensitive
from reliable_messaging._producers import producer_refusal
from reliable_messaging._publisher import BatchPublisher
from reliable_messaging.models import DeadLetter, InboxMessage

logger = logging.getLogger("reliable_messaging.dead_letters")

# Broker properties worth keeping (the headers are kept apart). ``user_id`` is the producer
# RabbitMQ validated on the delivery that was dead-lettered: a replay is checked against it.
_KEPT_PROPERTIES = ("message_id", "correlation_id", "content_type", "content_encoding", "delivery_mode", "user_id")


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
    """Store a dead letter; the same message dead-lettered again updates its row. ``attempts``
    is clamped to what the column holds: a forged count must not make the row unstorable."""
    now = timezone.now()
    attempts = clamped_count(attempts)
    message_id = _text(properties.get("message_id"), 255)
    fields = {
        "event_type": _text(headers.get("event_type"), 200),
        "routing_key": _text(headers.get("x-original-routing-key") or routing_key, 255),
        "correlation_id": _text(properties.get("correlation_id"), 255),
        "reason": _text(reason, 100),
        "error": _text(error),
        "traceback": _text(traceback),
        "body": bytes(body),
        "headers": _json_safe(headers),
        "properties": {k: _json_safe(properties[k]) for k in _KEPT_PROPERTIES if properties.get(k) is not None},
        "last_failed_at": now,
        "replayed_at": None,  # failing again after a replay makes it a live dead letter again
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
            existing.attempts = min(existing.attempts + attempts, MAX_COUNT)
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


def _text(value, limit: int | None = None) -> str:
    """A text PostgreSQL can hold: no NUL (shown as ``\\x00``), at most ``limit`` characters.

    A dead letter is what a message that could not be handled leaves behind, whatever it holds:
    a value the database refused would leave it nowhere.
    """
    text = str(value or "").replace("\x00", "\\x00")
    return text[:limit] if limit else text


def _json_safe(value):
    if isinstance(value, dict):
        return {_text(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, bytes):
        return _text(value.decode("utf-8", errors="backslashreplace"))
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN nor infinity (AMQP's doubles do)
    if value is None or isinstance(value, int | float | bool):
        return value
    return _text(value)


# --- operators: list, show, replay, purge ----------------------------------------------------

# Headers that describe a failed delivery, not the event: a replay starts afresh without them.
_DELIVERY_HEADERS = ("x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason")


@dataclass(frozen=True)
class ReplayOutcome:
    dead_letter_id: int
    consumer: str
    message_id: str
    replayed: bool
    note: str = ""


def dead_letters_list(*, consumer: str | None = None, waiting: bool = False):
    """Dead letters by id; ``waiting``: only those not replayed since they failed."""
    letters = DeadLetter.objects.order_by("id")
    if waiting:
        letters = letters.filter(replayed_at__isnull=True)
    return letters.filter(consumer=consumer) if consumer else letters


def dead_letter_display_body(letter: DeadLetter) -> str:
    """The body for people: JSON pretty-printed with sensitive fields masked, else escaped text."""
    raw = bytes(letter.body)
    try:
        return json.dumps(mask_sensitive(json.loads(raw)), indent=2, sort_keys=True)
    except ValueError:
        return raw.decode("utf-8", errors="backslashreplace")


def _replay_message_id(letter: DeadLetter, new_id: bool) -> str:
    if not new_id:
        return letter.message_id
    # Derived, not random: a replay interrupted before it was recorded reuses the same id, so
    # the inbox still stops a double effect; each completed --new-id replay gets a fresh one.
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"dead-letter:{letter.pk}:{letter.message_id}:{letter.replay_count}"))


def recorded_producer(letter: DeadLetter) -> str | None:
    """The broker user that published the dead-lettered delivery, as RabbitMQ validated it;
    None when it had none or none was recorded (a row stored without its properties, or older)."""
    return letter.properties.get("user_id") or None


def _producer_refused(letter: DeadLetter) -> str | None:
    """Why replaying ``letter`` would pass off a producer its consumer does not accept, if so.

    A replay goes out under this deployment's own broker user, which the consumer's producer
    check accepts: so the check is made here, on the producer recorded when it was dead-lettered
    (a message forged into the queue, its delay queue or its dead-letter queue fails it)."""
    if refusal := producer_refusal(letter.event_type, recorded_producer(letter)):
        return f"its producer is not accepted: {refusal} (recorded when it was dead-lettered)"
    return None


def _replay_note(letter: DeadLetter, message_id: str, new_id: bool) -> str | None:
    """Why a replay would do nothing or might do something twice, if so."""
    if refused := _producer_refused(letter):
        return refused
    if not message_id:
        return "it has no message_id, so it cannot be deduplicated: replay it with --new-id"
    if new_id:
        return None
    handled = InboxMessage.objects.filter(consumer=letter.consumer, message_id=message_id).first()
    if handled:
        return (
            f"{letter.consumer} already handled this message at {handled.handled_at:%Y-%m-%d %H:%M:%S}: "
            "use --new-id to run it again"
        )
    return None


def dead_letter_replay(*, ids: list[int], new_id: bool = False) -> list[ReplayOutcome]:
    """Republish dead letters to their own consumer's queue (never to the other contexts).

    By default the message keeps its ``message_id``, so the inbox still protects against a
    double effect; ``new_id`` makes it a new message that will run again.
    """
    letters = list(DeadLetter.objects.filter(pk__in=ids).order_by("id"))
    missing = sorted(set(ids) - {letter.pk for letter in letters})
    outcomes = [ReplayOutcome(i, "-", "-", False, "no such dead letter") for i in missing]
    if not letters:
        return outcomes
    retention = duration("INBOX_RETENTION")
    with broker.connect() as connection:
        connection.connect()
        broker.declare_topology(connection)
        publisher = BatchPublisher(connection, setting("RELAY_CONFIRM_TIMEOUT"))
        try:
            for letter in letters:
                outcomes.append(_replay_one(letter, new_id, publisher, retention))
        finally:
            publisher.close()
    return outcomes


def _replay_one(letter: DeadLetter, new_id: bool, publisher: BatchPublisher, retention: timedelta) -> ReplayOutcome:
    message_id = _replay_message_id(letter, new_id)
    blocked = _replay_note(letter, message_id, new_id)
    if blocked:
        return ReplayOutcome(letter.pk, letter.consumer, letter.message_id or "-", False, blocked)
    headers = {k: v for k, v in letter.headers.items() if k not in _DELIVERY_HEADERS}
    headers.update({ATTEMPT_HEADER: 1, "x-replayed-from": letter.pk})
    if letter.routing_key:
        headers.setdefault("x-original-routing-key", letter.routing_key)
    envelope = Envelope(
        message_id=message_id,
        exchange="",
        routing_key=queue_name(letter.consumer),
        body=bytes(letter.body),
        correlation_id=str(letter.properties.get("correlation_id") or letter.correlation_id or ""),
        headers=headers,
    )
    result = publisher.publish([envelope])
    if result.failed:
        return ReplayOutcome(letter.pk, letter.consumer, message_id, False, result.failed[message_id])
    DeadLetter.objects.filter(pk=letter.pk).update(replayed_at=timezone.now(), replay_count=letter.replay_count + 1)
    note = f"as a new message {message_id}" if new_id else ""
    if not new_id and timezone.now() - letter.first_failed_at > retention:
        note = (
            "older than INBOX_RETENTION: if this consumer handled it before and its inbox row is "
            "purged, it will be handled again"
        )
    logger.info(
        "dead letter replayed",
        extra={"dead_letter_id": letter.pk, "consumer": letter.consumer, "message_id": message_id},
    )
    return ReplayOutcome(letter.pk, letter.consumer, message_id, True, note)


def dead_letter_replay_all(*, consumer: str | None = None, new_id: bool = False) -> list[ReplayOutcome]:
    """Replay every dead letter not replayed since it last failed."""
    ids = list(dead_letters_list(consumer=consumer).filter(replayed_at__isnull=True).values_list("pk", flat=True))
    return dead_letter_replay(ids=ids, new_id=new_id)


def dead_letter_purge(*, ids: list[int]) -> int:
    deleted, _ = DeadLetter.objects.filter(pk__in=ids).delete()
    return deleted
