"""Operator writes over the outbox, inbox, event log and dead letters: parked rows and retention.

The relay purges by the retentions every ``HOUSEKEEPING_INTERVAL`` (``OutboxRelay``), so a
deployment needs no cron; ``purge_messages`` does the same at once. Payloads stored apart go with
the last row that refers to them (``reliable_messaging._claim_check``)."""

from dataclasses import dataclass, replace
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from reliable_messaging import _claim_check as claim_check
from reliable_messaging._conf import duration, setting
from reliable_messaging._declarations import hosted
from reliable_messaging.models import DeadLetter, DeadLetterFlood, EventLogEntry, InboxMessage, OutboxMessage, StepKey

PURGE_BATCH = 5000
REFERENCES_BATCH = 1000  # stored payloads looked up in the tables at a time


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
    stored_payloads: int = 0

    def __str__(self) -> str:
        text = f"outbox {self.outbox}, inbox {self.inbox}, event log {self.event_log}, dead letters {self.dead_letters}"
        if self.stored_payloads or setting("CLAIM_CHECK_BYTES") is not None:
            text += f", stored payloads {self.stored_payloads}"
        return text


def messages_purge() -> PurgeResult:
    """Delete what is past its retention: published outbox rows, inbox rows, event-log rows, and
    dead letters (``DEAD_LETTER_RETENTION`` since they last failed; a replayed one
    ``REPLAYED_DEAD_LETTER_RETENTION`` since its replay: its message lives on), and a flood's counts
    (``DEAD_LETTER_RETENTION`` since their window's last refusal), and saga commands' step keys
    (``INBOX_RETENTION``, as the inbox).

    A pending or parked outbox row is never deleted. Rows are deleted in batches locked with
    SKIP LOCKED, so several purges can run at once without waiting on each other. Then the payloads
    stored apart that no outbox row or dead letter refers to any more are deleted.
    """
    now = timezone.now()
    waiting = DeadLetter.objects.filter(replayed_at__isnull=True)
    purged = PurgeResult(
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
    # A flood's counts go with the dead letters of their time (the counts, not messages: not reported).
    _purge(DeadLetterFlood.objects.filter(last_at__lt=now - duration("DEAD_LETTER_RETENTION")))
    # A saga command's step key is its participant's inbox row by another key: kept as long.
    _purge(StepKey.objects.filter(handled_at__lt=now - duration("INBOX_RETENTION")))
    published = {event_type for declaration in hosted() for event_type in declaration.publishes}
    return replace(purged, stored_payloads=claim_check.sweep(published, _still_referenced))


def _still_referenced(event_type: str, stored: dict[str, str]) -> set[str]:
    """Of these stored payloads of ``event_type`` (name -> message id), those an outbox row
    (pending, parked or within its retention) or a dead letter (waiting, or replayed and within its
    retention) refers to."""
    kept: set[str] = set()
    names = list(stored)
    for start in range(0, len(names), REFERENCES_BATCH):
        batch = names[start : start + REFERENCES_BATCH]
        rows = OutboxMessage.objects.filter(event_id__in={stored[name] for name in batch})
        live = {str(event_id) for event_id in rows.values_list("event_id", flat=True)}
        kept.update(name for name in batch if stored[name] in live)
        key = f"headers__{claim_check.HEADER}__key"
        letters = DeadLetter.objects.filter(**{f"{key}__in": [f"{event_type}/{name}" for name in batch]})
        kept.update(str(referred).split("/", 1)[1] for referred in letters.values_list(key, flat=True))
    return kept


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
