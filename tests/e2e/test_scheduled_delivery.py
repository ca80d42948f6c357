"""Scheduled messages through real relay processes on PostgreSQL and RabbitMQ: a relay SIGKILLed
before their time, and a new one started, publishes each exactly once at or after its time; a
cancelled one never reaches the broker."""

import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from reliable_messaging.api import cancel_scheduled, publish
from reliable_messaging.models import OutboxMessage, ScheduledMessage

from faultlib.processes import wait_until
from tests.conftest import ALL_DATABASES
from tests.support.outbox import unchecked_publishing

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

EVENT = "test.reminder.due"


def schedule(deliver_at, n: int):
    with unchecked_publishing(), transaction.atomic():
        return publish(
            event_type=EVENT, payload={"n": n}, aggregate_type="thing", aggregate_id=f"a{n}", deliver_at=deliver_at
        )


def relay_listening() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'outbox_relay'"
        )
        return cursor.fetchone()[0] > 0


def test_scheduled_messages_survive_a_killed_relay_and_are_published_once_at_their_time(
    processes, capture, quiet_broker
):
    captured = capture(EVENT)
    due_at = timezone.now() + timedelta(seconds=4)
    kept = [schedule(due_at, n) for n in range(3)]
    withdrawn = schedule(due_at, 99)
    doomed = processes.start("relay", "run_outbox_relay")
    wait_until(relay_listening, timeout=30, message="the relay to start")
    processes.kill(doomed)  # before their time
    assert cancel_scheduled(withdrawn) is True
    assert (captured.count(), ScheduledMessage.objects.count()) == (0, 3)

    relay = processes.start("relay", "run_outbox_relay")
    wait_until(lambda: captured.count() >= 3, timeout=30, message="the scheduled messages published")
    time.sleep(2)  # a second move or publish would show by now (the relay looks every second)
    assert processes.stop(relay) == 0

    received = captured.drain()
    assert sorted(message_id for message_id, _, _ in received) == sorted(str(m) for m in kept)
    published = OutboxMessage.objects.filter(published_at__isnull=False)
    assert sorted(published.values_list("event_id", flat=True)) == sorted(kept)
    assert min(published.values_list("published_at", flat=True)) >= due_at  # not before their time
    assert ScheduledMessage.objects.count() == 0
    assert not OutboxMessage.objects.filter(event_id=withdrawn).exists()
