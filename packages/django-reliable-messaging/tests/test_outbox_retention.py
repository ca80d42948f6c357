"""What the retentions never touch: a pending or a parked outbox row, however old; and parked rows
given fresh attempts, one by one or all."""

from datetime import timedelta

import pytest
from django.utils import timezone
from reliable_messaging._housekeeping import messages_purge, outbox_retry_parked
from reliable_messaging.models import EventLogEntry, InboxMessage, OutboxMessage

pytestmark = pytest.mark.django_db


def make_row(n: int, *, published_days_ago=None, parked=False, created_days_ago=30) -> OutboxMessage:
    now = timezone.now()
    return OutboxMessage.objects.create(
        source="notes",
        aggregate_type="note",
        aggregate_id=str(n),
        event_type="notes.note.written",
        correlation_id=str(n),
        payload={},
        created_at=now - timedelta(days=created_days_ago),
        published_at=None if published_days_ago is None else now - timedelta(days=published_days_ago),
        parked_at=now if parked else None,
        attempts=10 if parked else 0,
    )


def test_purge_deletes_only_what_is_past_retention_and_never_a_pending_or_parked_row():
    old_published = make_row(1, published_days_ago=8)
    recent_published = make_row(2, published_days_ago=1)
    ancient_pending = make_row(3)
    ancient_parked = make_row(4, parked=True)
    now = timezone.now()
    InboxMessage.objects.create(consumer="archive", message_id="old", handled_at=now - timedelta(days=15))
    InboxMessage.objects.create(consumer="archive", message_id="new", handled_at=now - timedelta(days=13))
    EventLogEntry.objects.create(message_id="old", event_type="x", recorded_at=now - timedelta(days=91))
    EventLogEntry.objects.create(message_id="new", event_type="x", recorded_at=now - timedelta(days=89))

    result = messages_purge()

    assert (result.outbox, result.inbox, result.event_log) == (1, 1, 1)
    assert set(OutboxMessage.objects.values_list("pk", flat=True)) == {
        recent_published.pk,
        ancient_pending.pk,
        ancient_parked.pk,
    }
    assert not OutboxMessage.objects.filter(pk=old_published.pk).exists()
    assert list(InboxMessage.objects.values_list("message_id", flat=True)) == ["new"]
    assert list(EventLogEntry.objects.values_list("message_id", flat=True)) == ["new"]


def test_parked_rows_can_be_given_fresh_attempts():
    parked = make_row(1, parked=True)
    other_parked = make_row(2, parked=True)

    assert outbox_retry_parked(ids=[parked.pk]) == 1
    parked.refresh_from_db()
    assert (parked.parked_at, parked.attempts, parked.next_attempt_at) == (None, 0, None)
    other_parked.refresh_from_db()
    assert other_parked.parked_at is not None
    assert outbox_retry_parked() == 1
