"""Operator writes over the outbox, inbox, event log and dead letters: parked rows and retention.

The relay purges by the retentions every ``HOUSEKEEPING_INTERVAL`` (``OutboxRelay``), so a
deployment needs no cron; ``purge_messages`` does the same at once."""

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from reliable_messaging._conf import duration
from reliable_messaging.models import DeadLetter, EventLogEntry, InboxMessage, OutboxMessage

PURGE_BATCH = 5000


def outbox_retry_parked(*, ids: list[int] | None = None) -> int:
    """Give parked rows a fresh set of attempts; ``None`` means every parked row."""
    parked = OutboxMessage.objects.filter(published_at__isnull=True, parked_at__isnull=False)
    if ids is not None:
        parked = parked.filter(pk__in=ids)
    return parked.update(parked_at=None, next_attempt_at=None, attempts=0)


@dataclass(frozen=True)
class PurgeResult:
    outbox: int
    inbox: int
    event_log: int
    dead_letters: int

    def __str__(self) -> str:
        return f"outbox {self.outbox}, inbox {self.inbox}, event log {self.event_log}, dead letters {self.dead_letters}"


def messages_purge() -> PurgeResult:
    """Delete what is past its retention: published outbox rows, inbox rows, event-log rows, and
    dead letters (``DEAD_LETTER_RETENTION`` since they last failed; a replayed one
    ``REPLAYED_DEAD_LETTER_RETENTION`` since its replay: its message lives on).

    A pending or parked outbox row is never deleted. Rows are deleted in batches locked with
    SKIP LOCKED, so several purges can run at once without waiting on each other.
    """
    now = timezone.now()
    waiting = DeadLetter.objects.filter(replayed_at__isnull=True)
    return PurgeResult(
        outbox=_purge(
            OutboxMessage.objects.filter(
                published_at__isnull=False,
                published_at__lt=now - duration("OUTBOX_RETENTION"),
            )
        ),
        inbox=_purge(InboxMessage.objects.filter(handled_at__lt=now - duration("INBOX_RETENTION"))),
        event_log=_purge(EventLogEntry.objects.filter(recorded_at__lt=now - duration("EVENT_LOG_RETENTION"))),
        dead_letters=_purge(waiting.filter(last_failed_at__lt=now - duration("DEAD_LETTER_RETENTION")))
        + _purge(DeadLetter.objects.filter(replayed_at__lt=now - duration("REPLAYED_DEAD_LETTER_RETENTION"))),
    )


def _purge(queryset: QuerySet[Any, Any]) -> int:
    deleted = 0
    while True:
        with transaction.atomic():
            ids = list(queryset.select_for_update(skip_locked=True).values_list("pk", flat=True)[:PURGE_BATCH])
            if ids:
                queryset.model._default_manager.filter(pk__in=ids).delete()  # its objects
        deleted += len(ids)
        if len(ids) < PURGE_BATCH:
            return deleted
