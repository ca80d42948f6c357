"""Writing events to the outbox, inside the caller's transaction."""

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any

import structlog
from django.db import transaction
from django.utils import timezone

from reliable_messaging._contracts import publish_refusal, version_to_write
from reliable_messaging._declarations import context_of
from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._field_crypto import encrypt_fields
from reliable_messaging._ids import new_event_id
from reliable_messaging._sql import insert_row, insert_rows
from reliable_messaging._telemetry import creation_context
from reliable_messaging.models import OutboxMessage, ScheduledMessage

# The message being handled, so that what a handler publishes names its cause.
_handling: ContextVar[IncomingEvent | None] = ContextVar("messaging_handling", default=None)
# Within a consumer's batch: the outbox rows published so far, written by the batch in one insert.
_collected: ContextVar[list[dict[str, Any]] | None] = ContextVar("messaging_outbox_collected", default=None)


class OutsideTransactionError(RuntimeError):
    """``publish`` was called in autocommit mode: the event and the change would be two writes."""


class UnpublishableEvent(ValueError):
    """``publish`` was given an event its context does not declare, or a payload its schema refuses:
    nothing was written (a consumer would only dead-letter it)."""


def publish(
    *,
    event_type: str,
    payload: dict[str, Any],
    aggregate_type: str,
    aggregate_id: str,
    correlation_id: str | None = None,
    schema_version: int | None = None,
    occurred_at: datetime | None = None,
    deliver_at: datetime | None = None,
    using: str = "default",
) -> uuid.UUID:
    """Write an event to the outbox in the current transaction and return its message id.

    ``occurred_at`` (default: now) is the time of the change it announces; the event's
    ``occurred_at`` header and its place in the timeline come from it. ``payload`` is the
    newest version's shape: it is written in the version ``EVENT_VERSIONS`` pins, if any
    (``schema_version`` given: written as it is, in that version).

    Refused with ``UnpublishableEvent`` before anything is written: an event type its context
    does not declare, or a payload the version's schema refuses (the message names the field).

    ``deliver_at`` (timezone-aware) schedules it: kept apart until then (reliable_messaging/_scheduled.py),
    published at or after that time with that time as its ``occurred_at``, cancellable by the
    returned id until it is published. A time already past publishes it now.
    """
    if not transaction.get_connection(using).in_atomic_block:
        raise OutsideTransactionError(
            f"publish({event_type}) must run inside transaction.atomic() with the change it announces"
        )
    row = event_row(
        event_type=event_type,
        payload=payload,
        aggregate_type=aggregate_type,
        aggregate_id=aggregate_id,
        correlation_id=correlation_id,
        schema_version=schema_version,
        occurred_at=occurred_at,
        deliver_at=deliver_at,
    )
    collected = _collected.get()
    if "deliver_at" in row:
        insert_row(ScheduledMessage, row, using=using)
    elif collected is not None and using == "default":
        collected.append(row)
    else:
        insert_row(OutboxMessage, row, using=using)
    event_id: uuid.UUID = row["event_id"]
    return event_id


def event_row(
    *,
    event_type: str,
    payload: dict[str, Any],
    aggregate_type: str,
    aggregate_id: str,
    correlation_id: str | None = None,
    schema_version: int | None = None,
    occurred_at: datetime | None = None,
    deliver_at: datetime | None = None,
) -> dict[str, Any]:
    """``publish``'s row, checked as it checks it, not written: a scheduled message's (it has
    ``deliver_at``) while ``deliver_at`` is to come, else the outbox's. For a writer of many
    rows in one insert (``insert_rows``), in the transaction of the change they announce."""
    if deliver_at is not None and timezone.is_naive(deliver_at):
        raise ValueError("deliver_at must be timezone-aware")
    if schema_version is None:
        schema_version, payload = version_to_write(event_type, payload)
    if refusal := publish_refusal(event_type, schema_version, payload):
        raise UnpublishableEvent(refusal)
    # The schema judges the clear payload; what is written holds the declared fields encrypted.
    payload = encrypt_fields(event_type, schema_version, payload)
    cause = _handling.get()
    event_id = new_event_id()
    # The span this event is written in (the request's, or the handled message's): the relay's
    # span for it will be that span's child.
    trace_context = creation_context(cause.headers if cause else None)
    row = {
        "event_id": event_id,
        "source": context_of(event_type),
        "event_type": event_type,
        "aggregate_type": aggregate_type,
        "aggregate_id": str(aggregate_id),
        "correlation_id": str(correlation_id if correlation_id is not None else aggregate_id),
        "causation_id": cause.message_id if cause else "",
        "traceparent": trace_context.get("traceparent", ""),
        "tracestate": trace_context.get("tracestate", ""),
        "schema_version": schema_version,
        "payload": payload,
        "created_at": occurred_at or timezone.now(),
        "attempts": 0,
        "last_error": "",
    }
    if deliver_at is not None and deliver_at > timezone.now():
        return _scheduled_row(row, deliver_at)
    return row


def publish_again(*, event_type: str, correlation_id: str, using: str = "default") -> bool:
    """Send the newest ``event_type`` of ``correlation_id`` this deployment wrote once more, as it
    was: same message id, payload and cause (the relay publishes it again at its next look). For a
    reply asked for twice (a command sent again after its deadline): every consumer that had it
    finds its message id in its inbox, so the answer repeats and nothing happens twice. False if
    there is none (never written here, or past the outbox's retention)."""
    if not transaction.get_connection(using).in_atomic_block:
        raise OutsideTransactionError(f"publish_again({event_type}) must run inside transaction.atomic()")
    rows = OutboxMessage.objects.using(using).filter(event_type=event_type, correlation_id=correlation_id)
    row = rows.order_by("-created_at", "-id").first()
    if row is None:
        return False
    if row.published_at is not None:
        rows.filter(pk=row.pk).update(published_at=None, attempts=0, next_attempt_at=None, parked_at=None)
    return True


def _scheduled_row(row: dict[str, Any], deliver_at: datetime) -> dict[str, Any]:
    kept = {key: value for key, value in row.items() if key not in ("attempts", "last_error", "created_at")}
    return {**kept, "created_at": timezone.now(), "deliver_at": deliver_at}


@contextmanager
def collecting() -> Iterator[list[dict[str, Any]]]:
    """Inside: ``publish`` adds its row to the list instead of inserting it, for one insert of
    them all (``write_collected``) in the same transaction. A caller that rolls back part of
    its work drops that part's rows from the list."""
    rows: list[dict[str, Any]] = []
    token = _collected.set(rows)
    try:
        yield rows
    finally:
        _collected.reset(token)


def write_collected(rows: list[dict[str, Any]], chunk: int = 500) -> None:
    """Write the rows ``collecting()`` gathered, in the caller's transaction: one insert per
    ``chunk`` rows (none for none). Rows written are not removed from the list."""
    if not transaction.get_connection().in_atomic_block:
        raise OutsideTransactionError("write_collected() must run inside the transaction that published the rows")
    for start in range(0, len(rows), chunk):
        insert_rows(OutboxMessage, rows[start : start + chunk])


def current_cause() -> dict[str, str]:
    """The message being handled, as a later ``caused_by`` needs it: its id and the trace context
    its handling runs in. Empty outside a handler."""
    cause = _handling.get()
    if cause is None:
        return {}
    return {"message_id": cause.message_id, **creation_context(cause.headers)}


@contextmanager
def caused_by(cause: Mapping[str, str]) -> Iterator[None]:
    """What is published inside names ``cause`` (a ``current_cause()`` kept earlier) as its cause and
    continues its trace: for work a handler left to finish later, outside it (a network call a
    worker of its context makes and records afterwards)."""
    if not cause.get("message_id"):
        yield
        return
    trace = {k: v for k, v in cause.items() if k != "message_id"}
    event = IncomingEvent(message_id=cause["message_id"], event_type="", schema_version=0, payload={}, headers=trace)
    with handling(event):
        yield


@contextmanager
def handling(event: IncomingEvent) -> Iterator[None]:
    """Inside, ``event`` is the message being handled: what is published names it as its cause, and
    every log line written (a handler's own included) carries its ids."""
    token = _handling.set(event)
    ids = {"message_id": event.message_id, "event_type": event.event_type, "correlation_id": event.correlation_id}
    try:
        with structlog.contextvars.bound_contextvars(**{key: value for key, value in ids.items() if value}):
            yield
    finally:
        _handling.reset(token)
