"""The consumer with what a broker hands it: poison messages become dead letters and never block
the queue; what RabbitMQ dead-letters itself is moved to the dead-letter table; a handler that keeps
failing is retried, then dead-lettered and counted as such; heartbeats keep a connection alive
through a slow handler."""

import json
import threading
import time
import uuid

import pytest
from archive.models import Filed
from django.db import connection, connections, transaction
from notes.services import write_note
from reliable_messaging.models import DeadLetter, InboxMessage
from retrying.bus import bus, consume, relay  # noqa: F401 - bus: the fixture

from conftest import amqp, amqp_connection

needs_rabbitmq = pytest.mark.skipif(not amqp(), reason="raw messages are published to RabbitMQ")


def headers(event_type: str = "notes.note.written", version: int = 1) -> dict:
    return {"event_type": event_type, "schema_version": version, "occurred_at": "2026-01-01T00:00:00+00:00"}


def note(note_id: str | None = None, **overrides) -> bytes:
    return json.dumps({"note_id": note_id or str(uuid.uuid4()), "text": "hello", **overrides}).encode()


def publish_raw(queue: str, body: bytes, headers: dict, message_id: str | None = None) -> None:
    """Straight into ``queue`` through the default exchange with py-amqp (exact header types), as a
    hostile producer, or RabbitMQ's own dead-lettering, would."""
    import amqp as py_amqp

    with amqp_connection() as broker:
        properties = {"message_id": message_id} if message_id else {}
        message = py_amqp.Message(body, application_headers=headers, delivery_mode=2, **properties)
        broker.channel().basic_publish_confirm(message, exchange="", routing_key=queue, mandatory=True)


@needs_rabbitmq
def test_poison_messages_become_dead_letters_and_never_block_the_queue(manage):
    manage("run_consumers", "--once")  # the topology declared
    valid_note = str(uuid.uuid4())
    ids = {reason: str(uuid.uuid4()) for reason in ["undecodable", "unknown", "version", "invalid", "valid"]}
    publish_raw("archive_queue", b"\xff\xfe{not json", headers(), ids["undecodable"])
    publish_raw("archive_queue", note(), headers())  # no message id
    publish_raw("archive_queue", note(), headers("notes.note.exploded"), ids["unknown"])
    publish_raw("archive_queue", note(), headers(version=99), ids["version"])
    publish_raw("archive_queue", note(text=""), headers(), ids["invalid"])
    publish_raw("archive_queue", note(valid_note), headers(), ids["valid"])

    manage("run_consumers", "--once")

    letters = {(d.message_id, d.reason) for d in DeadLetter.objects.filter(consumer="archive")}
    assert letters == {
        (ids["undecodable"], "undecodable_body"),
        ("", "missing_message_id"),
        (ids["unknown"], "unknown_event_type"),
        (ids["version"], "unsupported_schema_version"),
        (ids["invalid"], "invalid_payload"),
    }
    undecodable = DeadLetter.objects.get(message_id=ids["undecodable"])
    assert bytes(undecodable.body) == b"\xff\xfe{not json"
    assert undecodable.headers["event_type"] == "notes.note.written"
    assert [str(n) for n in Filed.objects.values_list("note_id", flat=True)] == [valid_note]
    assert not InboxMessage.objects.filter(message_id__in=[ids[k] for k in ids if k != "valid"]).exists()


@needs_rabbitmq
def test_what_rabbitmq_dead_letters_is_moved_to_the_dead_letter_table(manage):
    manage("run_consumers", "--once")  # the topology declared
    message_id = str(uuid.uuid4())
    # As RabbitMQ leaves a message that hit the quorum queue's delivery limit.
    x_death = {
        "count": 20,
        "reason": "delivery_limit",
        "queue": "archive_queue",
        "exchange": "events",
        "routing-keys": ["notes.note.written"],
    }
    publish_raw("archive_queue_dead_letters", note(), {**headers(), "x-death": [x_death]}, message_id)

    manage("run_consumers", "--once")

    letter = DeadLetter.objects.get()
    assert (letter.consumer, letter.message_id, letter.reason) == ("archive", message_id, "broker_delivery_limit")
    assert (letter.routing_key, letter.attempts) == ("notes.note.written", 20)
    assert not InboxMessage.objects.filter(message_id=message_id).exists()


def counted(consumer: str) -> dict[str, float]:
    """The consumer's counts of notes.note.written deliveries by outcome, in this process."""
    from prometheus_client import REGISTRY

    return {
        sample.labels["outcome"]: sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == "messaging_consumer_messages_total"
        and (sample.labels["consumer"], sample.labels["event_type"]) == (consumer, "notes.note.written")
    }


@pytest.mark.usefixtures("bus")
def test_a_handler_that_keeps_failing_is_retried_then_dead_lettered_and_counted_as_such():
    pytest.importorskip("prometheus_client", reason="the extra 'metrics'")
    before = counted("retrying")
    write_note("failing note")
    write_note("fine")
    relay()

    consume("retrying")  # attempts = 3 (retrying/context.toml)

    # two retries, and the third delivery became a dead letter: counted as such, not as a retry
    now = counted("retrying")
    assert {outcome: now[outcome] - before.get(outcome, 0) for outcome in now} == {
        "handled": 1,
        "retry": 2,
        "dead_letter": 1,
    }
    letter = DeadLetter.objects.get(consumer="retrying")
    assert letter.reason == "handler_error"
    assert letter.attempts == 3
    assert letter.first_failed_at < letter.last_failed_at
    assert "the shelf is busy" in letter.error
    assert letter.routing_key == "notes.note.written"


@needs_rabbitmq
@pytest.mark.skipif(connection.vendor != "postgresql", reason="a row held by another session: PostgreSQL's")
def test_heartbeats_keep_the_connection_alive_through_a_slow_handler(manage, with_settings):
    """A handler that waits 5 s (its note's row, which another session holds) with 1 s heartbeats:
    without heartbeats during the handler RabbitMQ would drop the connection, the ack would fail and
    the message would come back."""
    note_id = str(write_note("slow").id)
    manage("run_outbox_relay", "--once")
    held, released = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        """Files the note first, uncommitted, for 5 s, then rolls back: the handler's insert waits."""
        try:
            with transaction.atomic():
                Filed.objects.create(note_id=note_id, text="held")
                held.set()
                time.sleep(5)
                transaction.set_rollback(True)
        finally:
            released.set()
            connections.close_all()

    holder = threading.Thread(target=hold_the_row, daemon=True)
    holder.start()
    assert held.wait(10)
    started = time.monotonic()
    consumed = with_settings(BROKER_HEARTBEAT=1)("run_consumers", "--once")
    holder.join(10)

    assert consumed.stderr.count("handled consumer=archive") == 1
    assert "duplicate" not in consumed.stderr
    assert "broker unavailable" not in consumed.stderr
    assert released.is_set() and time.monotonic() - started >= 4  # the handler did wait for the row
    assert list(Filed.objects.values_list("text", flat=True)) == ["slow"]
