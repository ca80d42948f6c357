"""Hostile headers and properties, published with py-amqp itself (exact header types) into a
running consumer's queues on RabbitMQ: each becomes a dead letter with its reason, the consumer
process never stops, nothing hostile takes effect, and the next genuine note is filed."""

import json
import uuid

import amqp as py_amqp
import pytest
from archive.models import Filed
from notes.services import write_note
from reliable_messaging._edge import MAX_COUNT
from reliable_messaging.models import DeadLetter, OutboxMessage

from conftest import amqp, amqp_connection, wait_until

pytestmark = pytest.mark.skipif(not amqp(), reason="raw messages are published to RabbitMQ")


def send(queue: str, body: bytes, *, message_id: str | bytes | None = None, **headers) -> str:
    """Into ``queue`` through the default exchange, exactly as given; the message id it is stored
    under ("" when it cannot be decoded)."""
    message_id = message_id if message_id is not None else str(uuid.uuid4())
    with amqp_connection() as broker:
        message = py_amqp.Message(
            body,
            application_headers={"event_type": "notes.note.written", "schema_version": 1, **headers},
            message_id=message_id,
            content_type="application/json",
            delivery_mode=2,
        )
        broker.channel().basic_publish_confirm(message, exchange="", routing_key=queue, mandatory=True)
    return message_id if isinstance(message_id, str) else ""


def note(**overrides) -> bytes:
    return json.dumps({"note_id": str(uuid.uuid4()), "text": "hostile", **overrides}).encode()


def letters() -> set[tuple[str, str]]:
    return set(DeadLetter.objects.values_list("message_id", "reason"))


def test_hostile_headers_and_bodies_are_dead_letters_and_the_consumer_keeps_consuming(workers):
    genuine = write_note("genuine")
    workers("run_outbox_relay", "--once")
    consumer = workers.start("run_consumers")
    wait_until(lambda: Filed.objects.filter(note_id=genuine.id).exists(), timeout=30, message="the genuine note")
    expected: set[tuple[str, str]] = set()

    # an x-attempt of another type, or out of range
    for attempt in ["abc", [1, 2], -10, 0, 2**40]:
        expected.add((send("archive_queue", note(), **{"x-attempt": attempt}), "invalid_headers"))
    # 100,000 [
    expected.add((send("archive_queue", b"[" * 100_000), "invalid_payload"))
    # properties py-amqp cannot decode (it raised inside drain_events): a message id that is not UTF-8
    expected.add((send("archive_queue", note(), message_id=b"\xff\xfe"), "invalid_headers"))
    # a malformed x-death straight into the dead-letter queue (no delivery limit there)
    unreadable = send("archive_queue_dead_letters", note(), **{"x-death": "x"})
    bad_count = send("archive_queue_dead_letters", note(), **{"x-death": [{"count": "abc"}]})
    # a number past any column: an x-death count of 2^40
    huge_count = send(
        "archive_queue_dead_letters",
        note(),
        **{"x-death": [{"count": 2**40, "reason": "delivery_limit", "queue": "archive_queue"}]},
    )
    expected |= {
        (unreadable, "broker_dead_lettered"),
        (bad_count, "broker_dead_lettered"),
        (huge_count, "broker_delivery_limit"),
    }
    # an instant in year 10000
    expected.add((send("archive_queue", note(), occurred_at="9999-12-31T23:59:59-14:00"), "invalid_headers"))
    # the genuine note's own event id again, with another text
    written = OutboxMessage.objects.get(event_type="notes.note.written")
    forged = {**written.payload, "text": "forged"}
    reused_id = send("archive_queue", json.dumps(forged).encode(), message_id=str(written.event_id))
    expected.add((reused_id, "message_id_reused"))

    wait_until(lambda: len(letters()) >= len(expected), timeout=60, message=f"{len(expected)} dead letters")
    assert letters() == expected
    assert DeadLetter.objects.get(message_id="").error == (
        "its properties could not be decoded: UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff "
        "in position 0: invalid start byte"
    )
    assert consumer.poll() is None
    assert DeadLetter.objects.get(message_id=huge_count).attempts == MAX_COUNT
    assert "x-death unreadable: str 'x'" in DeadLetter.objects.get(message_id=unreadable).error
    assert "x-death fields unreadable: count" in DeadLetter.objects.get(message_id=bad_count).error
    reused = DeadLetter.objects.get(reason="message_id_reused")
    assert reused.error.startswith(f"archive handled message {written.event_id} with content sha256 ")
    # nothing of the hostile messages took effect
    assert list(Filed.objects.values_list("text", flat=True)) == ["genuine"]

    # and the next genuine note goes through the same process
    after = write_note("after")
    workers("run_outbox_relay", "--once")
    wait_until(lambda: Filed.objects.filter(note_id=after.id).exists(), timeout=30, message="the next note")
    assert consumer.poll() is None
    assert workers.stop(consumer) == 0
