"""How a batch decides members whose handlers misbehave, in process.

Each test swaps the archive consumer's handler for ``notes.note.written`` for one of its own and
hands ``decide_batch`` three deliveries; the handler's effect is a row in the inbox (the claim) plus
what the handler records on commit."""

import json
import uuid

import pytest
from django.db import DataError, connection, transaction
from reliable_messaging import _registry as registry
from reliable_messaging._dispatch import Delivery, Outcome, decide_batch
from reliable_messaging.models import InboxMessage

pytestmark = pytest.mark.django_db(transaction=True)
postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite neither raises on 1 / 0 nor checks a column's length"
)

EVENT = "notes.note.written"


def delivery(message_id: str, *, behaviour: str) -> Delivery:
    return Delivery(
        consumer="archive",
        body=json.dumps({"note_id": message_id, "behaviour": behaviour}).encode(),
        properties={"message_id": message_id, "correlation_id": message_id},
        headers={"event_type": EVENT, "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"},
        routing_key=EVENT,
    )


@pytest.fixture
def committed(monkeypatch) -> list[str]:
    """Install the test handler; returns the note ids whose on-commit callbacks ran."""
    ran: list[str] = []

    def handler(event) -> None:
        note_id = event.payload["note_id"]
        transaction.on_commit(lambda: ran.append(note_id))
        match event.payload["behaviour"]:
            case "fails":
                raise RuntimeError("the shelf fell")
            case "swallows_a_database_error":
                try:
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT 1 / 0")
                except DataError:
                    pass  # the transaction is aborted all the same

    spec = registry.HandlerSpec("archive", EVENT, handler, (1,))
    monkeypatch.setitem(registry._handlers, "archive", {EVENT: spec})
    return ran


def claimed() -> set[str]:
    return set(InboxMessage.objects.filter(consumer="archive").values_list("message_id", flat=True))


def test_a_failing_member_loses_its_claim_and_its_on_commit_callbacks_the_others_keep_theirs(committed):
    decisions = decide_batch(
        [delivery("a", behaviour="ok"), delivery("b", behaviour="fails"), delivery("c", behaviour="ok")]
    )

    assert [d.outcome for d in decisions] == [Outcome.HANDLED, Outcome.RETRY, Outcome.HANDLED]
    assert "RuntimeError: the shelf fell" in decisions[1].error
    assert claimed() == {"a", "c"}
    assert sorted(committed) == ["a", "c"]


@postgresql_only
@pytest.mark.parametrize("position", [0, 1, 2])
def test_a_handler_that_swallows_a_database_error_is_never_acked_as_handled(committed, position):
    behaviours = ["ok", "ok", "ok"]
    behaviours[position] = "swallows_a_database_error"
    ids = [f"m{n}" for n in range(3)]

    decisions = decide_batch([delivery(i, behaviour=b) for i, b in zip(ids, behaviours, strict=True)])

    expected = [Outcome.RETRY if n == position else Outcome.HANDLED for n in range(3)]
    assert [d.outcome for d in decisions] == expected
    assert claimed() == {i for n, i in enumerate(ids) if n != position}
    assert sorted(committed) == sorted(i for n, i in enumerate(ids) if n != position)


@postgresql_only
def test_a_value_the_database_refuses_fails_its_member_only(committed):
    # Longer than the inbox's column: only the filesystem broker carries it (AMQP caps it at 255 bytes).
    refused = f"{'x' * 300}{uuid.uuid4()}"

    decisions = decide_batch(
        [delivery("a", behaviour="ok"), delivery(refused, behaviour="ok"), delivery("c", behaviour="ok")]
    )

    assert [d.outcome for d in decisions] == [Outcome.HANDLED, Outcome.RETRY, Outcome.HANDLED]
    assert claimed() == {"a", "c"}
    assert sorted(committed) == ["a", "c"]
