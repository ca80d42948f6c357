"""Scheduled messages: ``publish(deliver_at=...)`` keeps the event in ``messaging_scheduled``
until its time; the relay then moves it into the outbox, from where it is published like any
other event (at or after ``deliver_at``: within the relay's poll interval once due).

Moving is one transaction per batch (insert into the outbox, delete here), with the due rows
locked ``SKIP LOCKED``: two relays never move one message twice, and a crash before the commit
leaves it scheduled. The message keeps its ``event_id``, so a cancellation names the id
``publish`` returned, and a consumer's inbox sees one message whatever happened.
"""

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Min
from django.utils import timezone

from reliable_messaging._sql import insert_rows
from reliable_messaging.models import OutboxMessage, ScheduledMessage

MOVED_PER_TRANSACTION = 500
# What the outbox row takes from the scheduled one: every field but its own id and times.
OUTBOX_COLUMNS = tuple(
    field.name for field in ScheduledMessage._meta.fields if field.name not in ("id", "created_at", "deliver_at")
)


@dataclass(frozen=True)
class ScheduledBacklog:
    scheduled: int
    oldest_overdue_seconds: float  # a due message not yet moved (no relay running); 0 when none


@transaction.atomic
def move_due_messages(limit: int = MOVED_PER_TRANSACTION, *, now: datetime | None = None) -> int:
    """Move up to ``limit`` messages whose time has come (by ``now``, the clock unless a test runs
    it forward: ``testing.advance_time``) into the outbox; how many were moved."""
    due = ScheduledMessage.objects.filter(deliver_at__lte=now or timezone.now()).order_by("deliver_at")
    if connection.vendor == "postgresql":
        due = due.select_for_update(skip_locked=True)
    rows = list(due.values("id", "deliver_at", *OUTBOX_COLUMNS)[:limit])
    if not rows:
        return 0
    # It occurs when it is due (a timer firing): the outbox's age, backlog and the timeline
    # count from then, not from when it was scheduled.
    outbox = [{**_outbox_fields(row), "created_at": row["deliver_at"], "attempts": 0, "last_error": ""} for row in rows]
    insert_rows(OutboxMessage, outbox)
    ScheduledMessage.objects.filter(pk__in=[row["id"] for row in rows]).delete()
    return len(rows)


def _outbox_fields(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row[key] for key in OUTBOX_COLUMNS}


def any_due() -> bool:
    """One indexed read: whether a move is needed at all (the relay asks before it writes)."""
    return ScheduledMessage.objects.filter(deliver_at__lte=timezone.now()).exists()


def cancel_scheduled(message_id: uuid.UUID | str) -> bool:
    """Delete a scheduled message before it is published: True if it was still scheduled, False
    if it was already moved to the outbox (published or about to be) or never existed. One
    statement, in the caller's transaction if any (no savepoint: a saga's every move cancels one)."""
    deleted, _ = ScheduledMessage.objects.filter(event_id=message_id).delete()
    return deleted > 0


def scheduled_delivery_time(message_id: uuid.UUID | str) -> datetime | None:
    """When a scheduled message is due (None once moved to the outbox, cancelled or unknown)."""
    return ScheduledMessage.objects.filter(event_id=message_id).values_list("deliver_at", flat=True).first()


def scheduled_backlog() -> ScheduledBacklog:
    now = timezone.now()
    stats = ScheduledMessage.objects.aggregate(count=Count("id"), earliest=Min("deliver_at"))
    earliest = stats["earliest"]
    overdue = (now - earliest).total_seconds() if earliest is not None and earliest < now else 0.0
    return ScheduledBacklog(scheduled=stats["count"], oldest_overdue_seconds=overdue)
