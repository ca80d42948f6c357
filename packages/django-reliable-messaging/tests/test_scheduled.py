"""Scheduled messages (``publish(deliver_at=...)``, reliable_messaging/_scheduled.py): kept apart
until their time, moved into the outbox once (two movers at once included, on PostgreSQL),
cancellable until then (in the admin too), gone with a rolled-back publisher, and counted for the
host's metrics (``operator.scheduled_backlog``)."""

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import DataError, connection, transaction
from django.utils import timezone
from reliable_messaging._scheduled import move_due_messages
from reliable_messaging.api import cancel_scheduled, publish
from reliable_messaging.models import OutboxMessage, ScheduledMessage
from reliable_messaging.operator import outbox_backlog, scheduled_backlog
from reliable_messaging.testing import example_payload

pytestmark = pytest.mark.django_db

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="PostgreSQL's: SQLite has one writer and unbounded varchars"
)
EVENT = "notes.note.written"  # any declared event: publish refuses others
PAYLOAD = example_payload(EVENT)


def schedule(deliver_at, n: int = 0) -> uuid.UUID:
    with transaction.atomic():
        return publish(
            event_type=EVENT, payload=PAYLOAD, aggregate_type="thing", aggregate_id=f"a{n}", deliver_at=deliver_at
        )


def make_due(*message_ids) -> None:
    ScheduledMessage.objects.filter(event_id__in=message_ids).update(deliver_at=timezone.now() - timedelta(seconds=1))


def test_a_scheduled_message_waits_apart_then_moves_to_the_outbox_once_with_its_id():
    message_id = schedule(timezone.now() + timedelta(minutes=10))

    assert OutboxMessage.objects.count() == 0
    [row] = ScheduledMessage.objects.all()
    assert (row.event_id, row.event_type, row.payload, row.correlation_id) == (message_id, EVENT, PAYLOAD, "a0")
    assert move_due_messages() == 0  # not its time

    make_due(message_id)
    due = ScheduledMessage.objects.get().deliver_at
    assert move_due_messages() == 1
    assert move_due_messages() == 0

    [moved] = OutboxMessage.objects.all()
    assert (moved.event_id, moved.event_type, moved.payload, moved.published_at) == (message_id, EVENT, PAYLOAD, None)
    assert moved.created_at == due  # it occurs when due: the outbox's age counts from then
    assert ScheduledMessage.objects.count() == 0


def test_a_time_already_past_publishes_at_once_and_a_naive_time_is_refused():
    message_id = schedule(timezone.now() - timedelta(seconds=5))

    assert OutboxMessage.objects.filter(event_id=message_id).count() == 1
    assert ScheduledMessage.objects.count() == 0
    with pytest.raises(ValueError, match="deliver_at must be timezone-aware"), transaction.atomic():
        publish(
            event_type=EVENT,
            payload=PAYLOAD,
            aggregate_type="thing",
            aggregate_id="x",
            deliver_at=timezone.now().replace(tzinfo=None),
        )
    assert OutboxMessage.objects.count() == 1


@postgresql_only
def test_a_correlation_id_the_outbox_would_refuse_is_refused_when_scheduled():
    with pytest.raises(DataError), transaction.atomic():
        publish(
            event_type=EVENT,
            payload=PAYLOAD,
            aggregate_type="thing",
            aggregate_id="x",
            correlation_id="c" * 101,
            deliver_at=timezone.now() + timedelta(minutes=1),
        )
    assert ScheduledMessage.objects.count() == 0


def test_cancelled_before_its_time_it_is_never_moved_and_after_it_cancel_says_so():
    kept, cancelled = (
        schedule(timezone.now() + timedelta(minutes=5), 1),
        schedule(timezone.now() + timedelta(minutes=5), 2),
    )

    assert cancel_scheduled(cancelled) is True
    assert cancel_scheduled(cancelled) is False  # already gone
    make_due(kept)
    assert move_due_messages() == 1
    assert cancel_scheduled(kept) is False  # moved: too late to withdraw

    assert list(OutboxMessage.objects.values_list("event_id", flat=True)) == [kept]
    assert cancel_scheduled(uuid.uuid4()) is False


def test_a_rolled_back_publisher_schedules_nothing():
    with pytest.raises(RuntimeError), transaction.atomic():
        publish(
            event_type=EVENT,
            payload=PAYLOAD,
            aggregate_type="thing",
            aggregate_id="x",
            deliver_at=timezone.now() + timedelta(minutes=1),
        )
        raise RuntimeError("the change failed")

    assert ScheduledMessage.objects.count() == 0


@postgresql_only
@pytest.mark.django_db(transaction=True)  # two sessions of their own
def test_two_movers_at_once_move_each_message_exactly_once():
    with transaction.atomic():  # one commit for the 1,200 (each publish its own savepoint)
        ids = [schedule(timezone.now() + timedelta(minutes=1), n) for n in range(1200)]
    make_due(*ids)
    start = threading.Barrier(2)
    moved = []

    def mover():
        start.wait()
        try:
            while count := move_due_messages(limit=100):
                moved.append(count)
        finally:
            connection.close()

    threads = [threading.Thread(target=mover) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sum(moved) == 1200
    assert sorted(OutboxMessage.objects.values_list("event_id", flat=True)) == sorted(ids)
    assert ScheduledMessage.objects.count() == 0


def test_the_backlog_counts_scheduled_messages_and_how_overdue_the_oldest_is():
    schedule(timezone.now() + timedelta(minutes=5), 1)
    overdue = schedule(timezone.now() + timedelta(minutes=5), 2)
    ScheduledMessage.objects.filter(event_id=overdue).update(deliver_at=timezone.now() - timedelta(seconds=90))

    backlog = scheduled_backlog()

    assert backlog.scheduled == 2 and 90 <= backlog.oldest_overdue_seconds < 120
    assert outbox_backlog().pending == 0  # scheduled is not pending: no relay alert for it


def test_the_admin_lists_scheduled_messages_as_scheduled_and_the_overdue_as_such(admin_client):
    schedule(timezone.now() + timedelta(minutes=5), 1)
    overdue = schedule(timezone.now() + timedelta(minutes=5), 2)
    ScheduledMessage.objects.filter(event_id=overdue).update(deliver_at=timezone.now() - timedelta(minutes=3))

    page = admin_client.get("/admin/messaging/scheduledmessage/")

    assert page.status_code == 200
    html = page.content.decode()
    assert html.count(">scheduled</span>") == 1
    assert html.count(">overdue: no relay moves it</span>") == 1


def test_an_operator_cancels_a_scheduled_message_from_its_admin_page(admin_client):
    message_id = schedule(timezone.now() + timedelta(minutes=5), 1)
    row = ScheduledMessage.objects.get()

    page = admin_client.get(f"/admin/messaging/scheduledmessage/{row.pk}/change/").content.decode()
    assert f'href="/admin/messaging/scheduledmessage/{row.pk}/cancel/"' in page
    admin_client.post(f"/admin/messaging/scheduledmessage/{row.pk}/cancel/", {"confirm": "yes"})

    assert not ScheduledMessage.objects.exists()
    make_due(message_id)
    assert move_due_messages() == 0
