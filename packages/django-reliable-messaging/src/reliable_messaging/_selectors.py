"""Reads over messaging's tables: the saga timeline and the backlog figures."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min, Q
from django.db.models.functions import TruncMinute
from django.utils import timezone

from reliable_messaging._declarations import context_of
from reliable_messaging._masking import mask_sensitive
from reliable_messaging._registry import local_consumers
from reliable_messaging._timeline import DeadLetterMark, Handling, TimelineEntry
from reliable_messaging.models import DeadLetter, EventLogEntry, InboxMessage, OutboxMessage, ScheduledMessage

# The most entries one timeline shows: whatever is published under a correlation id (a flood of
# forgeries naming it), the pages built on it stay small and quick.
TIMELINE_LIMIT = 200


def timeline_for(correlation_id: str, *, detailed: bool = False) -> list[TimelineEntry]:
    """Every event of one correlation id (one saga), published or not, one entry per message id, the
    earliest ``TIMELINE_LIMIT`` of them; a scheduled message not yet due is there too (state
    ``scheduled``, at its delivery time).

    The outbox holds what is produced (including what is still waiting to be published);
    the event log holds what was seen on the bus and outlives the outbox's retention.
    With ``detailed``, each entry also says who handled it and what is stuck.
    """
    entries: dict[str, TimelineEntry] = {}
    for row in EventLogEntry.objects.filter(correlation_id=correlation_id).order_by("occurred_at")[:TIMELINE_LIMIT]:
        entries[row.message_id] = TimelineEntry(
            event_type=row.event_type,
            message_id=row.message_id,
            occurred_at=row.occurred_at or row.recorded_at,
            published_at=row.recorded_at,
            source=context_of(row.event_type),
            causation_id=row.causation_id or None,
            state="published",
            payload=row.payload,
        )
    for message in OutboxMessage.objects.filter(correlation_id=correlation_id).order_by("created_at")[:TIMELINE_LIMIT]:
        entries[str(message.event_id)] = TimelineEntry(
            event_type=message.event_type,
            message_id=str(message.event_id),
            occurred_at=message.created_at,
            published_at=message.published_at,
            source=message.source,
            causation_id=message.causation_id or None,
            state=message.state,
            payload=mask_sensitive(message.payload),
            attempts=message.attempts,
            last_error=message.last_error,
        )
    scheduled = ScheduledMessage.objects.filter(correlation_id=correlation_id).order_by("deliver_at")[:TIMELINE_LIMIT]
    for due in scheduled:  # due later: not stuck
        entries.setdefault(
            str(due.event_id),
            TimelineEntry(
                event_type=due.event_type,
                message_id=str(due.event_id),
                occurred_at=due.deliver_at,
                published_at=None,
                source=due.source,
                causation_id=due.causation_id or None,
                state="scheduled",
                payload=mask_sensitive(due.payload),
            ),
        )
    ordered = sorted(entries.values(), key=lambda e: (e.occurred_at, e.message_id))[:TIMELINE_LIMIT]
    if detailed:
        _add_handling(ordered)
    return ordered


def timeline_entry_of_new_event(*, event_type: str, message_id: str, occurred_at: datetime) -> TimelineEntry:
    """What ``timeline_for`` shows for an event published in the current transaction, outside
    any handler: still pending, with no cause. Spares a read-back of what was just written."""
    return TimelineEntry(
        event_type=event_type,
        message_id=message_id,
        occurred_at=occurred_at,
        published_at=None,
        source=context_of(event_type),
        causation_id=None,
        state="pending",
    )


def _add_handling(entries: list[TimelineEntry]) -> None:
    """Who handled each entry, and its dead letters.

    A consumer of this deployment left an inbox row. A consumer hosted elsewhere left nothing
    here, but the events it published in answer name their cause (``causation_id``) and come
    back through the event log: that it caused one is the proof it handled the message (a
    context's consumer carries the context's name, the first word of what it publishes).
    """
    message_ids = [e.message_id for e in entries]
    local = set(local_consumers())
    handled: dict[str, list[Handling]] = {}
    for row in InboxMessage.objects.filter(message_id__in=message_ids).order_by("handled_at"):
        handled.setdefault(row.message_id, []).append(Handling(consumer=row.consumer, handled_at=row.handled_at))
    for effect in entries:
        cause, consumer = effect.causation_id, effect.source
        if not cause or consumer in local:
            continue
        seen = handled.setdefault(cause, [])
        if all(h.consumer != consumer for h in seen):
            seen.append(Handling(consumer=consumer, handled_at=effect.occurred_at, caused=effect.event_type))
    dead: dict[str, list[DeadLetterMark]] = {}
    for letter in DeadLetter.objects.filter(message_id__in=message_ids):
        dead.setdefault(letter.message_id, []).append(
            DeadLetterMark(
                id=letter.pk,
                consumer=letter.consumer,
                reason=letter.reason,
                error=letter.error,
                replayed_at=letter.replayed_at,
            )
        )
    for entry in entries:
        entry.handled_by = sorted(handled.get(entry.message_id, []), key=lambda h: h.handled_at)
        entry.dead_letters = dead.get(entry.message_id, [])


@dataclass(frozen=True)
class OutboxBacklog:
    pending: int  # rows waiting to be published, not parked
    oldest_pending_age: float  # seconds; 0.0 when none waits
    parked: int


@dataclass(frozen=True)
class OldestDeadLetter:
    """A consumer's dead letter that has waited longest for an operator."""

    consumer: str
    message_id: str
    correlation_id: str
    reason: str
    age_seconds: float


@dataclass(frozen=True)
class BacklogPoint:
    """The outbox at one moment: rows waiting (pending and parked) and the oldest one's age."""

    at: datetime
    waiting: int
    oldest_age: float  # seconds


def outbox_backlog() -> OutboxBacklog:
    """Pending and parked rows and the age of the oldest pending one, in seconds."""
    pending = OutboxMessage.objects.filter(published_at__isnull=True, parked_at__isnull=True)
    stats = pending.aggregate(count=Count("id"), oldest=Min("created_at"))
    oldest: datetime | None = stats["oldest"]
    return OutboxBacklog(
        pending=stats["count"],
        oldest_pending_age=(timezone.now() - oldest).total_seconds() if oldest else 0.0,
        parked=OutboxMessage.objects.filter(published_at__isnull=True, parked_at__isnull=False).count(),
    )


def dead_letter_counts() -> dict[str, int]:
    return dict(DeadLetter.objects.values_list("consumer").annotate(n=Count("id")).values_list("consumer", "n"))


def dead_letter_counts_by_state() -> dict[tuple[str, str], int]:
    """Dead letters per (consumer, state): ``waiting`` for an operator, or ``replayed``."""
    rows = DeadLetter.objects.values("consumer").annotate(
        waiting=Count("id", filter=Q(replayed_at__isnull=True)),
        replayed=Count("id", filter=Q(replayed_at__isnull=False)),
    )
    counts = {}
    for row in rows:
        counts[(row["consumer"], "waiting")] = row["waiting"]
        counts[(row["consumer"], "replayed")] = row["replayed"]
    return counts


def oldest_waiting_dead_letters() -> list[OldestDeadLetter]:
    """Per local consumer, the dead letter that has waited longest for an operator (none if none
    waits). One indexed query per consumer, so an alert can say which saga is stuck and why,
    not just how many."""
    now = timezone.now()
    oldest = []
    for consumer in local_consumers():
        letter = (
            DeadLetter.objects.filter(consumer=consumer, replayed_at__isnull=True)
            .order_by("last_failed_at", "id")
            .only("message_id", "correlation_id", "reason", "last_failed_at")
            .first()
        )
        if letter is not None:
            oldest.append(
                OldestDeadLetter(
                    consumer=consumer,
                    message_id=letter.message_id,
                    correlation_id=letter.correlation_id,
                    reason=letter.reason,
                    age_seconds=max(0.0, (now - letter.last_failed_at).total_seconds()),
                )
            )
    return oldest


def outbox_backlog_history(*, until: datetime, minutes: int = 60) -> list[BacklogPoint]:
    """The outbox backlog at the end of each of the last ``minutes`` minutes (the last point is
    ``until``); waiting counts pending and parked rows.

    A row was waiting at ``t`` if it was created before ``t`` and not published by then. Three
    grouped queries, each on an index, instead of a scan per minute: the rows still waiting
    (pending; parked) by minute of creation, and the rows published since the first point by
    minute of publication and of creation. Minutes are the resolution: a row is counted at
    ``t`` if it was created in a minute before ``t`` and published in ``t``'s minute or later.
    """
    end = until.replace(second=0, microsecond=0)
    points = [end - timedelta(minutes=minutes - 2 - i) for i in range(minutes - 1)] + [until]
    groups: list[tuple[datetime | None, datetime, int, datetime]] = []  # (published, created, count, oldest)
    unpublished = OutboxMessage.objects.filter(published_at__isnull=True)
    for rows in (unpublished.filter(parked_at__isnull=True), unpublished.filter(parked_at__isnull=False)):
        for row in (
            rows.annotate(created=TruncMinute("created_at"))
            .values("created")
            .annotate(n=Count("id"), oldest=Min("created_at"))
        ):
            groups.append((None, row["created"], row["n"], row["oldest"]))
    for row in (
        OutboxMessage.objects.filter(published_at__gte=points[0])
        .annotate(published=TruncMinute("published_at"), created=TruncMinute("created_at"))
        .values("published", "created")
        .annotate(n=Count("id"), oldest=Min("created_at"))
    ):
        groups.append((row["published"], row["created"], row["n"], row["oldest"]))
    history = []
    for at in points:
        waiting = [
            (n, oldest)
            for published, created, n, oldest in groups
            if created < at and (published is None or published >= at)
        ]
        first = min((oldest for _, oldest in waiting), default=None)
        history.append(
            BacklogPoint(
                at=at,
                waiting=sum(n for n, _ in waiting),
                oldest_age=(at - first).total_seconds() if first else 0.0,
            )
        )
    return history
