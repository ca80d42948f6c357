"""The outbox relay as processes run it: two relays or three pipelines publish every row once and
never skip a row committed late; a message no queue takes is retried, then parked; a relay killed
between the broker's confirm and its commit publishes again, and the consumer's inbox keeps the
effect single."""

import threading
import uuid
from datetime import timedelta

import pytest
from archive.models import Filed
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from kombu import Connection, Exchange, Queue
from reliable_messaging._relay import OutboxRelay
from reliable_messaging.api import publish
from reliable_messaging.models import InboxMessage, OutboxMessage

from conftest import amqp, wait_until

postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent writers: PostgreSQL's")
rabbitmq = pytest.mark.skipif(not amqp(), reason="reads what arrived from a queue of RabbitMQ's")


def publish_notes(count: int, event_type: str = "notes.note.written") -> list[str]:
    with transaction.atomic():
        return [str(publish(**note(event_type, n))) for n in range(count)]


def note(event_type: str, n: int) -> dict:
    note_id = str(uuid.uuid4())
    payload = (
        {"note_id": note_id, "filed": 1}
        if event_type == "archive.note.filed"
        else {"note_id": note_id, "text": f"n{n}"}
    )
    return {"event_type": event_type, "payload": payload, "aggregate_type": "note", "aggregate_id": note_id}


def unpublished() -> int:
    return OutboxMessage.objects.filter(published_at__isnull=True).count()


class Capture:
    """A queue of the test's own on RabbitMQ, bound to the exchange, to count what really arrives."""

    def __init__(self, binding_key: str, exchange: str | None = None):
        self.url = settings.MESSAGING["BROKER_URL"]
        exchange = Exchange(exchange or settings.MESSAGING.get("EXCHANGE", "events"), type="topic", durable=True)
        self.queue = Queue(
            f"test_capture_{uuid.uuid4().hex[:10]}", exchange, routing_key=binding_key, auto_delete=False
        )
        with Connection(self.url) as broker:
            self.queue(broker.default_channel).declare()

    def count(self) -> int:
        with Connection(self.url) as broker:
            return self.queue(broker.default_channel).queue_declare(passive=True).message_count

    def drain(self) -> list[str]:
        """The message ids of everything in the queue, taken out."""
        with Connection(self.url) as broker:
            queue = self.queue(broker.default_channel)
            received = []
            while (message := queue.get(no_ack=True)) is not None:
                received.append(message.properties["message_id"])
            return received

    def delete(self) -> None:
        with Connection(self.url) as broker:
            self.queue(broker.default_channel).delete()


@pytest.fixture
def capture():
    made = []

    def make(binding_key: str, exchange: str | None = None) -> Capture:
        made.append(Capture(binding_key, exchange))
        return made[-1]

    yield make
    for queue in made:
        queue.delete()


class LateTransaction(threading.Thread):
    """Writes an outbox row in a transaction that commits only when told to."""

    def __init__(self):
        super().__init__(daemon=True)
        self.written = threading.Event()
        self.release = threading.Event()
        self.message_id = None

    def run(self):
        try:
            with transaction.atomic():
                self.message_id = str(publish(**note("notes.note.written", -1)))
                self.written.set()
                self.release.wait(timeout=60)
        finally:
            connection.close()


@postgresql
@rabbitmq
def test_two_relays_publish_every_row_exactly_once_and_never_skip_a_late_commit(workers, capture):
    captured = capture("notes.#")
    late = LateTransaction()
    late.start()
    assert late.written.wait(10)
    message_ids = publish_notes(300)
    assert not OutboxMessage.objects.filter(event_id=late.message_id).exists()  # invisible until it commits

    relays = [workers.start("run_outbox_relay", "--batch-size", "20") for _ in range(2)]
    for relay in relays:  # both up: on a busy machine one could still be starting when the other is done
        wait_until(lambda relay=relay: "relay started" in relay.log.read_text(), timeout=60, message="a relay up")
    wait_until(lambda: unpublished() == 0, timeout=60, message="300 rows published")
    # The late row took its id and created_at before the 300 rows; a cursor over ids would skip it.
    late.release.set()
    late.join(10)
    late_row = OutboxMessage.objects.get(event_id=late.message_id)
    assert late_row.pk < OutboxMessage.objects.get(event_id=message_ids[0]).pk
    wait_until(lambda: unpublished() == 0, timeout=30, message="the late row published")
    assert [workers.stop(relay) for relay in relays] == [0, 0]

    received = captured.drain()
    assert len(received) == 301
    assert sorted(received) == sorted([*message_ids, late.message_id])
    assert OutboxMessage.objects.filter(published_at__isnull=False).count() == 301


@postgresql
@rabbitmq
def test_one_relay_process_with_three_pipelines_publishes_every_row_once(workers, capture):
    captured = capture("notes.#")
    message_ids = publish_notes(200)

    relay = workers.start("run_outbox_relay", "--batch-size", "10", "--pipelines", "3")
    wait_until(lambda: unpublished() == 0, timeout=60, message="200 rows published")
    # Three loops, each on a connection of its own that LISTENs for new rows.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'outbox_relay'"
        )
        assert cursor.fetchone()[0] == 3
    assert workers.stop(relay) == 0

    assert sorted(captured.drain()) == sorted(message_ids)


@rabbitmq
@pytest.mark.django_db(transaction=True)
def test_an_unroutable_message_is_not_marked_published_and_is_parked_after_its_attempts(settings, capture):
    exchange = f"test_unroutable_{uuid.uuid4().hex[:8]}"
    with Connection(settings.MESSAGING["BROKER_URL"]) as broker:
        test_exchange = Exchange(exchange, type="topic", durable=True)(broker.default_channel)
        test_exchange.declare()
        captured = capture("notes.note.written", exchange=exchange)
        settings.MESSAGING = {**settings.MESSAGING, "EXCHANGE": exchange, "RELAY_MAX_ATTEMPTS": 2}
        [routable] = publish_notes(1)
        [unroutable] = publish_notes(1, "archive.note.filed")  # nobody binds it on this exchange
        relay = OutboxRelay(declare_topology=False)
        try:
            relay._ensure_broker()
            assert relay.relay_batch() == 2
            row = OutboxMessage.objects.get(event_id=unroutable)
            assert row.published_at is None
            assert row.attempts == 1
            assert "returned by the broker" in row.last_error and "NO_ROUTE" in row.last_error
            assert row.next_attempt_at > timezone.now()
            assert OutboxMessage.objects.get(event_id=routable).published_at is not None
            assert captured.drain() == [routable]

            assert relay.relay_batch() == 0  # not before its next attempt time
            OutboxMessage.objects.filter(pk=row.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
            assert relay.relay_batch() == 1
            row.refresh_from_db()
            assert (row.attempts, row.published_at) == (2, None)
            assert row.parked_at is not None
            assert relay.relay_batch() == 0  # parked rows wait for an operator
        finally:
            relay._reset_broker()
            test_exchange.delete()


def test_a_relay_killed_between_confirm_and_commit_republishes_without_a_second_effect(workers, workdir, capture):
    captured = capture("notes.note.written") if amqp() else None
    [written] = publish_notes(1)
    marker = workdir / "relay-paused"

    doomed = workers.start("run_outbox_relay", env={"FAULT_POINT": "relay.after_confirm", "FAULT_MARKER": str(marker)})
    wait_until(marker.exists, timeout=30, message="the relay to reach the point after the confirms")
    if captured:
        assert captured.count() == 1  # the broker has it and confirmed it...
    workers.kill(doomed)
    assert OutboxMessage.objects.get(event_id=written).published_at is None  # ...but the commit never happened

    relay = workers.start("run_outbox_relay")
    wait_until(lambda: unpublished() == 0, timeout=30, message="the row published again")
    workers.stop(relay)
    if captured:
        assert captured.count() == 2  # delivered twice, same message id
        assert set(captured.drain()) == {written}

    consumed = workers("run_consumers", "--once")
    assert "duplicate" in consumed.stderr
    assert Filed.objects.count() == 1
    assert InboxMessage.objects.filter(consumer="archive", message_id=written).count() == 1
    assert OutboxMessage.objects.filter(event_type="archive.note.filed").count() == 1
