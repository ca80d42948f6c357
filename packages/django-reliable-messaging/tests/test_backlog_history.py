"""The outbox's backlog over the last hour (operator.outbox_backlog_history), what a host's
overview draws: at each minute, how many rows waited and the age of the oldest."""

from datetime import timedelta

import pytest
from django.utils import timezone
from reliable_messaging.models import OutboxMessage
from reliable_messaging.operator import outbox_backlog_history

pytestmark = pytest.mark.django_db


def row(created, published=None, parked=None) -> OutboxMessage:
    return OutboxMessage.objects.create(
        source="notes",
        event_type="notes.note.written",
        aggregate_type="note",
        aggregate_id="x",
        correlation_id="x",
        payload={},
        created_at=created,
        published_at=published,
        parked_at=parked,
    )


def test_the_backlog_history_counts_what_waited_at_each_minute_and_the_oldest_ones_age():
    now = timezone.now().replace(second=30, microsecond=0)
    minute = timedelta(minutes=1)
    row(now - 30 * minute, published=now - 20 * minute)  # waited from -30 to -20 minutes
    row(now - 10 * minute)  # still pending
    row(now - 5 * minute, parked=now - 4 * minute)  # parked: still waiting
    row(now - 50 * minute, published=now - 50 * minute)  # published the moment it was written

    history = outbox_backlog_history(until=now)

    assert len(history) == 60 and history[-1].at == now
    # Points sit on minute boundaries, k minutes before the current minute; the last one is now.
    by_minutes_ago = {int((now - p.at).total_seconds() // 60): p for p in history}
    assert [by_minutes_ago[m].waiting for m in (45, 25, 15, 8, 0)] == [0, 1, 0, 1, 2]
    assert by_minutes_ago[25].oldest_age == pytest.approx(4.5 * 60, abs=1)  # created 30.5 min before that point
    assert by_minutes_ago[8].oldest_age == pytest.approx(1.5 * 60, abs=1)
    assert history[-1].oldest_age == pytest.approx(10 * 60, abs=1)
    assert by_minutes_ago[45].oldest_age == 0.0
