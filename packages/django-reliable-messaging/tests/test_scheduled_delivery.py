"""Scheduled messages through real relay processes on PostgreSQL and RabbitMQ: a relay SIGKILLed
before their time, and a new one started, publishes each exactly once at or after its time; a
cancelled one never reaches the broker."""

import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from reliable_messaging import _broker as broker
from reliable_messaging.api import cancel_scheduled, publish
from reliable_messaging.models import OutboxMessage, ScheduledMessage

from conftest import HERE, amqp, drained, wait_until

pytestmark = [
    pytest.mark.skipif(
        not amqp() or connection.vendor != "postgresql", reason="relays as processes on PostgreSQL and RabbitMQ"
    ),
    pytest.mark.django_db(transaction=True),
]


def schedule(deliver_at) -> uuid.UUID:
    note_id = str(uuid.uuid4())
    with transaction.atomic():
        return publish(
            event_type="notes.note.written",
            payload={"note_id": note_id, "text": "later"},
            aggregate_type="note",
            aggregate_id=note_id,
            deliver_at=deliver_at,
        )


def relay_listening() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'outbox_relay'"
        )
        return cursor.fetchone()[0] > 0


def test_scheduled_messages_survive_a_killed_relay_and_are_published_once_at_their_time(manage):
    with broker.connect() as broker_connection:  # archive_queue bound, as a consumer's start would
        broker_connection.connect()
        broker.declare_topology(broker_connection, whole=True)

    def relay() -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(HERE / "manage.py"), "run_outbox_relay"],
            cwd=manage.cwd,
            env=manage.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    # Due in an hour while the first relay lives, however slowly it starts on a busy machine; then,
    # with it killed, brought forward to a few seconds from now (a clock moving on, as seen by the rows).
    kept = [schedule(timezone.now() + timedelta(hours=1)) for _ in range(3)]
    withdrawn = schedule(timezone.now() + timedelta(hours=1))
    doomed = relay()
    try:
        wait_until(relay_listening, timeout=30, message="the relay to start")
    finally:
        doomed.kill()  # before their time
        doomed.wait(timeout=30)
    assert cancel_scheduled(withdrawn) is True
    assert (drained("archive_queue"), ScheduledMessage.objects.count()) == ([], 3)
    due_at = timezone.now() + timedelta(seconds=3)
    assert ScheduledMessage.objects.update(deliver_at=due_at) == 3

    second = relay()
    try:
        received = []
        deadline = time.monotonic() + 30
        while len(received) < 3 and time.monotonic() < deadline:
            received += drained("archive_queue")
            time.sleep(0.2)
        time.sleep(2)  # a second move or publish would show by now (the relay looks every second)
        received += drained("archive_queue")
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
    assert second.returncode == 0

    assert sorted(message_id for message_id, _, _ in received) == sorted(str(m) for m in kept)
    published = OutboxMessage.objects.filter(published_at__isnull=False)
    assert sorted(published.values_list("event_id", flat=True)) == sorted(kept)
    assert min(published.values_list("published_at", flat=True)) >= due_at  # not before their time
    assert ScheduledMessage.objects.count() == 0
    assert not OutboxMessage.objects.filter(event_id=withdrawn).exists()
