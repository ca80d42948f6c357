"""The relay's batched frames on RabbitMQ: a body larger than a frame among many messages in one
write arrive intact and in order (frame_max is 128 KiB)."""

import json

import pytest
from reliable_messaging import _broker as broker
from reliable_messaging._relay import OutboxRelay
from reliable_messaging.models import OutboxMessage

from conftest import amqp, drained

pytestmark = [
    pytest.mark.skipif(not amqp(), reason="AMQP frames: RabbitMQ's"),
    pytest.mark.django_db(transaction=True),
]


def outbox_rows(payloads: list[dict]) -> list[str]:
    """Rows as a publisher wrote them (the relay reads no declaration: any payload is carried)."""
    rows = [
        OutboxMessage.objects.create(
            source="notes",
            event_type="notes.note.written",
            aggregate_type="note",
            aggregate_id=str(n),
            correlation_id=str(n),
            payload=payload,
        )
        for n, payload in enumerate(payloads)
    ]
    return [str(row.event_id) for row in rows]


def test_a_batch_with_a_body_larger_than_a_frame_arrives_intact(empty_queues):
    with broker.connect() as connection:  # archive_queue bound, as a consumer's start would
        connection.connect()
        broker.declare_topology(connection, whole=True)
    big = {"blob": "x" * 400_000}  # several AMQP frames (frame_max is 128 KiB)
    small = [{"n": n, "text": "é" * n} for n in range(300)]
    ids = outbox_rows([*small[:150], big, *small[150:]])
    relay = OutboxRelay()
    try:
        relay._ensure_broker()
        assert relay.relay_batch() == 301
    finally:
        relay._reset_broker()
    received = {message_id: (headers, body) for message_id, headers, body in drained("archive_queue")}
    assert list(received) == ids  # all of them, in order
    assert json.loads(received[ids[150]][1]) == big
    assert [json.loads(received[i][1]) for i in ids[:150] + ids[151:]] == small
    assert all(headers["event_type"] == "notes.note.written" for headers, _ in received.values())
    assert OutboxMessage.objects.filter(published_at__isnull=True).count() == 0
