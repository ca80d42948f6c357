"""A replay republishes only the event's own headers (issue 43): whatever else a publisher stored with
a dead letter (the bus's retry and wait headers, RabbitMQ's x-death, a replay's marks, headers of
its own) would otherwise go out again under this deployment's broker user."""

import json
import uuid
from typing import Any

import pytest
from reliable_messaging import _broker as broker
from reliable_messaging._dead_letters import dead_letter_edit, dead_letter_record, dead_letter_replay

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
EVENT_HEADERS = {
    "event_type": "notes.note.written",
    "schema_version": 1,
    "occurred_at": "2026-11-28T10:00:00+00:00",
    "source": "notes",
    "causation_id": "cause-1",
    "traceparent": TRACEPARENT,
    "tracestate": "vendor=" + "v" * 600,  # longer than the consumer passes on
}
HOSTILE_HEADERS = {
    "x-wait-until-ms": 4_102_444_800_000,  # 2100: a retry's wait, a day at most once honoured
    "x-attempt": 99,
    "x-first-failed-at": "2020-01-01T00:00:00+00:00",
    "x-last-error": "forged",
    "x-replay-of": "another-message",
    "x-replayed-from": 1,
    "x-dead-letter-edit": 7,
    "x-death": [{"count": 3, "queue": "archive_queue", "reason": "rejected"}],
    "x-delivery-count": 5,
    "x-tenant": "t1",
}


@pytest.fixture
def bus(workdir: Any, empty_queues: None) -> Any:
    """The test's own broker folder (filesystem) or emptied queues (RabbitMQ)."""
    return workdir


def stored(headers: dict[str, Any]) -> Any:
    note_id = str(uuid.uuid4())
    return dead_letter_record(
        consumer="archive",
        body=json.dumps({"note_id": note_id, "text": "too long"}).encode(),
        properties={"message_id": str(uuid.uuid4()), "correlation_id": note_id},
        headers=headers,
        routing_key="notes.note.written",
        reason="invalid_payload",
        error="InvalidPayload: the archive refuses it",
    )


def replayed_headers() -> dict[str, Any]:
    from kombu import Queue

    taken = []
    with broker.connect() as connection:
        connection.connect()
        queue = Queue("archive_queue")(connection.default_channel)
        while (message := queue.get(no_ack=True)) is not None:
            taken.append(message)
    (replay,) = taken
    # RabbitMQ's own, added at the delivery from a quorum queue
    return {name: value for name, value in replay.headers.items() if name != "x-delivery-count"}


@pytest.mark.django_db
def test_a_replay_carries_the_events_own_headers_and_leaves_out_every_other_stored_one(bus):
    dead = stored({**EVENT_HEADERS, **HOSTILE_HEADERS})

    [outcome] = dead_letter_replay(ids=[dead.pk])

    assert outcome.replayed
    assert replayed_headers() == {
        **{name: value for name, value in EVENT_HEADERS.items() if name != "tracestate"},
        "x-attempt": 1,
        "x-replayed-from": dead.pk,
        "x-original-routing-key": "notes.note.written",
    }


@pytest.mark.django_db
def test_a_replay_of_an_edit_names_its_original_and_carries_no_claim_check_nor_body_marks(bus):
    dead = stored({**EVENT_HEADERS, **HOSTILE_HEADERS, "x-claim-check": {"key": "k"}, "x-oversized-body": "cut"})
    edit = dead_letter_edit(dead.pk, json.dumps({**json.loads(bytes(dead.body)), "text": "fixed"}), by="ada",
                            via="command")  # fmt: skip

    [outcome] = dead_letter_replay(ids=[dead.pk])

    assert outcome.replayed
    assert replayed_headers() == {
        **{name: value for name, value in EVENT_HEADERS.items() if name != "tracestate"},
        "x-attempt": 1,
        "x-replayed-from": dead.pk,
        "x-replay-of": dead.message_id,
        "x-dead-letter-edit": edit.pk,
        "x-original-routing-key": "notes.note.written",
    }
