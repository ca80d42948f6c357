"""Backfill: the events of one type that the event log holds, sent once more to one consumer's queue.

A context that joins a running system receives what is published once its queue is bound
(``prepare_deployment``); what was published before is not its to receive. An operator who
wants it anyway replays it from the event log (kept ``EVENT_LOG_RETENTION``, where the context
hosting it runs, ``event_log = true``) into that queue only: with its original message id, so a
consumer that had one already finds it in its inbox (within ``INBOX_RETENTION``) and nothing
happens twice. Past that the inbox has forgotten it: an event recorded before the inbox's horizon
is refused unless the operator says the consumer never had it (``past_inbox_retention``: a
context that joined after it), or ``since`` leaves it out. The log keeps payloads masked
(``SENSITIVE_FIELDS``, at any depth): an event that carries one is refused, never sent masked.
With ``BROKER_PRODUCERS`` only the event's owner may send it (the consumers refuse another user):
run it with that user's ``BROKER_URL``.
"""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet
from django.utils import timezone
from kombu.exceptions import OperationalError

from reliable_messaging import _broker as broker
from reliable_messaging._conf import duration, queue_name, setting
from reliable_messaging._declarations import hosted, installed
from reliable_messaging._envelope import ATTEMPT_HEADER, Envelope, encode_body
from reliable_messaging._producers import owner_of
from reliable_messaging._publisher import BatchPublisher, ConfirmTimeout
from reliable_messaging.models import EventLogEntry

BATCH = 200


class BackfillRefused(ValueError):
    """Why nothing was sent."""


@dataclass(frozen=True)
class BackfillResult:
    queue: str
    sent: int
    failed: dict[str, str]  # message id -> the broker's reason


def backfill(
    *, event_type: str, consumer: str, since: datetime | None = None, past_inbox_retention: bool = False
) -> BackfillResult:
    if not any(d.event_log for d in hosted()):
        keeper = next((d.name for d in installed() if d.event_log), "the context declaring event_log = true")
        raise BackfillRefused(f"this deployment keeps no event log: run it where {keeper} is hosted")
    entries = EventLogEntry.objects.filter(event_type=event_type).order_by("occurred_at", "id")
    if since is not None:
        entries = entries.filter(occurred_at__gte=since)
    horizon = timezone.now() - duration("INBOX_RETENTION")
    if not past_inbox_retention and (forgotten := entries.filter(recorded_at__lt=horizon).count()):
        raise BackfillRefused(
            f"{forgotten} {event_type} were recorded before {horizon:%Y-%m-%d %H:%M:%S}, past the inbox's memory "
            f"(INBOX_RETENTION): a consumer that handled one then would handle it again. --since "
            f"{horizon.isoformat(timespec='seconds')} sends only the newer ones; --past-inbox-retention sends them "
            "all, for a consumer that never had them"
        )
    sensitive = set(setting("SENSITIVE_FIELDS"))
    if any(_holds_any(entry.payload, sensitive) for entry in entries.iterator()):
        raise BackfillRefused(
            f"{event_type} carries {', '.join(sorted(sensitive))}, which the event log keeps masked: "
            "it cannot be sent again from there"
        )
    queue = queue_name(consumer)
    try:
        with broker.connect() as connection:
            broker.connect_to_a_node(connection)
            owner = setting("PRODUCERS").get(owner_of(event_type))
            allowed = (owner, setting("BROKER_USER"))
            if setting("PRODUCERS") and broker.supports_confirms(connection) and connection.userid not in allowed:
                raise BackfillRefused(
                    f"{event_type} belongs to {owner_of(event_type)}, whose broker user is {owner!r}: its consumers "
                    f"refuse it from {connection.userid!r}; run this with that user's BROKER_URL"
                )
            sent, failed = _send_all(BatchPublisher(connection, setting("RELAY_CONFIRM_TIMEOUT")), entries, queue)
    except (OSError, OperationalError, ConfirmTimeout) as exc:
        raise ConnectionError(f"the broker (BROKER_URL) failed: {exc}; what was sent before is in the queue") from exc
    return BackfillResult(queue, sent, failed)


def _holds_any(data: object, keys: set[str]) -> bool:
    """Whether ``data`` has one of ``keys`` at any depth."""
    if isinstance(data, dict):
        return bool(keys & set(data)) or any(_holds_any(value, keys) for value in data.values())
    if isinstance(data, list):
        return any(_holds_any(item, keys) for item in data)
    return False


def _send_all(publisher: BatchPublisher, entries: QuerySet[EventLogEntry], queue: str) -> tuple[int, dict[str, str]]:
    sent, failed, batch = 0, dict[str, str](), list[Envelope]()
    try:
        for entry in entries.iterator():
            batch.append(_envelope(entry, queue))
            if len(batch) == BATCH:
                sent, failed = _send(publisher, batch, sent, failed)
                batch = []
        if batch:
            sent, failed = _send(publisher, batch, sent, failed)
    finally:
        publisher.close()
    return sent, failed


def _send(
    publisher: BatchPublisher, batch: list[Envelope], sent: int, failed: dict[str, str]
) -> tuple[int, dict[str, str]]:
    result = publisher.publish(batch)
    return sent + len(result.delivered), {**failed, **result.failed}


def _envelope(entry: EventLogEntry, queue: str) -> Envelope:
    headers = {
        "event_type": entry.event_type,
        "schema_version": entry.schema_version,
        "source": entry.event_type.split(".", 1)[0],
        ATTEMPT_HEADER: 1,
        "x-backfilled": True,
        "x-original-routing-key": entry.event_type,
    }
    if entry.occurred_at:
        headers["occurred_at"] = entry.occurred_at.isoformat()
    if entry.causation_id:
        headers["causation_id"] = entry.causation_id
    return Envelope(
        message_id=entry.message_id,
        exchange="",
        routing_key=queue,
        body=encode_body(entry.payload),
        correlation_id=entry.correlation_id,
        headers=headers,
    )
