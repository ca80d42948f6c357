"""A database connection lost under a consumer is no fault of the message that finds out.

A backend terminated while its connection is idle (``pg_terminate_backend``, a failover, a
restart) is only found out by the connection's next query. The message that runs it must be
decided again on a new connection, not charged an attempt of its retry budget: three such losses
would dead-letter a message whose handler was never at fault."""

import json
import logging
import uuid
from dataclasses import replace

import pytest
from archive.models import Filed
from django.db import connection, connections
from notes.services import write_note
from reliable_messaging import _dispatch as dispatch
from reliable_messaging._dispatch import Delivery, Outcome, decide, decide_batch
from reliable_messaging._lifecycle import drop_broken_db_connections
from reliable_messaging.models import InboxMessage, OutboxMessage

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="ending a backend, read-only sessions: PostgreSQL's"),
]

EVENT = "notes.note.written"


def written(note_id: str) -> Delivery:
    return Delivery(
        consumer="archive",
        body=json.dumps({"note_id": note_id, "text": "lost and found"}).encode(),
        properties={"message_id": str(uuid.uuid4()), "correlation_id": note_id},
        headers={"event_type": EVENT, "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"},
        routing_key=EVENT,
    )


def terminate_backend() -> None:
    """End the test's backend from another session, as an operator or a failover would."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        [pid] = cursor.fetchone()
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            assert cursor.fetchone() == (True,)
    finally:
        other.close()


def filed_once(notes: list[str]) -> bool:
    """Each note filed once, and its ``archive.note.filed`` in the outbox once."""
    filed = sorted(str(n) for n in Filed.objects.filter(note_id__in=notes).values_list("note_id", flat=True))
    said = sorted(OutboxMessage.objects.filter(event_type="archive.note.filed").values_list("aggregate_id", flat=True))
    return filed == sorted(notes) and [n for n in said if n in notes] == sorted(notes)


@pytest.fixture(autouse=True)
def fresh_connections():
    """A connection this test ended or made read-only is not the next test's."""
    yield
    connections.close_all()


def test_a_backend_terminated_while_idle_costs_a_lone_message_nothing(caplog):
    # given the archive consumer's connection, open and idle between two messages
    decide_batch([written(str(uuid.uuid4()))])
    # when it is terminated
    terminate_backend()

    # and the next message arrives alone
    drop_broken_db_connections()
    note_id = str(uuid.uuid4())
    with caplog.at_level(logging.INFO, logger="reliable_messaging.dispatch"):
        [decision] = decide_batch([written(note_id)])

    # then it is decided again at once on a new connection: handled, filed once, no retry
    assert decision.outcome is Outcome.HANDLED, decision.error
    assert filed_once([note_id])
    assert [r.getMessage() for r in caplog.records if r.name == "reliable_messaging.dispatch"] == [
        "database connection lost: decided again at once"
    ]


def test_a_backend_terminated_while_idle_costs_a_batch_nothing():
    # given the archive consumer's connection, open and idle between two batches
    decide_batch([written(str(uuid.uuid4()))])
    # when it is terminated
    terminate_backend()

    # and the next batch of three arrives (the consumer drops known-broken connections first)
    drop_broken_db_connections()
    batch = [written(str(uuid.uuid4())) for _ in range(3)]
    decisions = decide_batch(batch)

    # then every member is handled, each note filed exactly once, and nothing is left to retry
    assert [d.outcome for d in decisions] == [Outcome.HANDLED] * 3, [d.error for d in decisions]
    assert filed_once([json.loads(d.body)["note_id"] for d in batch])
    assert InboxMessage.objects.filter(consumer="archive").count() == 4


def sealed_note() -> Delivery:
    """A note whose author is sealed under their own key, as the relay would carry it."""
    note = write_note("sealed", author="ada-lovelace")
    row = OutboxMessage.objects.get(aggregate_id=str(note.id))
    delivery = replace(written(str(note.id)), body=json.dumps(row.payload).encode())
    delivery.headers["schema_version"] = row.schema_version
    return delivery


def test_a_backend_terminated_while_idle_costs_a_message_with_a_personal_field_nothing():
    """A sealed author's key is read first in the message's transaction (its batch's), so that read
    may be the one that finds the connection lost: the message is decided on a new one."""
    alone, in_batch, other = sealed_note(), sealed_note(), written(str(uuid.uuid4()))
    # given the consumer's connection idle, when its backend is terminated and a sealed note arrives alone
    terminate_backend()
    drop_broken_db_connections()
    [decided] = decide_batch([alone])
    # and again with a batch of two
    terminate_backend()
    drop_broken_db_connections()
    decisions = decide_batch([in_batch, other])

    # then each is handled, filed once, nothing left to retry
    assert decided.outcome is Outcome.HANDLED, decided.error
    assert [d.outcome for d in decisions] == [Outcome.HANDLED] * 2, [d.error for d in decisions]
    assert filed_once([json.loads(d.body)["note_id"] for d in (alone, in_batch, other)])


def test_a_connection_lost_again_on_the_new_connection_is_retried_later(monkeypatch):
    # given a database whose every new connection is lost at its first query (a server restarting)
    lost = []

    def lose_it(*args, **kwargs):
        lost.append(1)
        terminate_backend()
        return original(*args, **kwargs)

    original = dispatch.inbox_claim
    monkeypatch.setattr(dispatch, "inbox_claim", lose_it)
    delivery = written(str(uuid.uuid4()))

    # when a message is decided
    decision = decide(
        delivery.consumer,
        body=delivery.body,
        properties=delivery.properties,
        headers=delivery.headers,
        routing_key=delivery.routing_key,
    )

    # then it is tried twice, the second time on a new connection, and then left for a retry:
    # never a loop, and the database (which answers) is not reported down
    assert len(lost) == 2
    assert decision.outcome is Outcome.RETRY
    assert decision.error.startswith("OperationalError"), decision.error
    assert not Filed.objects.exists()


@pytest.mark.parametrize("size", [1, 3])
def test_a_write_refused_as_read_only_is_decided_again_on_a_new_connection(size, caplog):
    # given the archive consumer's connection, now on a server that refuses writes (a failover
    # left it on a standby: SQLSTATE 25006)
    decide_batch([written(str(uuid.uuid4()))])
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")

    # when the next message (or batch) arrives
    batch = [written(str(uuid.uuid4())) for _ in range(size)]
    with caplog.at_level(logging.INFO, logger="reliable_messaging.dispatch"):
        decisions = decide_batch(batch)

    # then it is decided again at once on a new connection, as after a lost one: handled, filed
    # once, not a handler error (never a retry that a failover could turn into a dead letter)
    assert [d.outcome for d in decisions] == [Outcome.HANDLED] * size, [d.error for d in decisions]
    assert filed_once([json.loads(d.body)["note_id"] for d in batch])
    if size == 1:
        assert [r.getMessage() for r in caplog.records if r.name == "reliable_messaging.dispatch"] == [
            "database connection lost: decided again at once"
        ]
