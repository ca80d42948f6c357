"""A message id handled before arrives again: a duplicate when its content is the same, a dead
letter ``message_id_reused`` naming both contents' hashes when it is not, on every path a delivery
can take: alone, in a batch, twice in one batch, in savepoints."""

import json

import pytest
from django.db import transaction
from reliable_messaging import _registry as registry
from reliable_messaging._dispatch import Delivery, Outcome, decide, decide_batch
from reliable_messaging.models import InboxMessage

pytestmark = pytest.mark.django_db(transaction=True)

EVENT = "notes.note.written"


def delivery(message_id: str, *, text: str, behaviour: str = "ok") -> Delivery:
    return Delivery(
        consumer="archive",
        body=json.dumps({"note_id": message_id, "text": text, "behaviour": behaviour}).encode(),
        properties={"message_id": message_id, "correlation_id": message_id},
        headers={"event_type": EVENT, "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"},
        routing_key=EVENT,
    )


@pytest.fixture
def handled(monkeypatch) -> list[tuple[str, str]]:
    """A test handler for archive's notes.note.written; returns (note id, text) of each commit."""
    ran: list[tuple[str, str]] = []

    def handler(event) -> None:
        payload = event.payload
        transaction.on_commit(lambda: ran.append((payload["note_id"], payload["text"])))
        if payload["behaviour"] == "fails":
            raise RuntimeError("the shelf fell")

    monkeypatch.setitem(registry._handlers, "archive", {EVENT: registry.HandlerSpec("archive", EVENT, handler, (1,))})
    return ran


def alone(d: Delivery):
    return decide(d.consumer, body=d.body, properties=d.properties, headers=d.headers, routing_key=d.routing_key)


def test_the_same_id_and_content_again_is_a_duplicate_and_other_content_a_dead_letter_naming_both_hashes(handled):
    first = alone(delivery("m1", text="ten"))

    again = alone(delivery("m1", text="ten"))
    reused = alone(delivery("m1", text="ninety-nine"))

    assert (first.outcome, again.outcome, reused.outcome) == (Outcome.HANDLED, Outcome.DUPLICATE, Outcome.DEAD_LETTER)
    stored = InboxMessage.objects.get(consumer="archive", message_id="m1").content_hash
    assert stored == first.event.content_hash != reused.event.content_hash
    assert reused.reason == "message_id_reused"
    assert reused.error == (
        f"archive handled message m1 with content sha256 {stored}; "
        f"this delivery's content is sha256 {reused.event.content_hash}"
    )
    assert handled == [("m1", "ten")]


def test_in_a_batch_a_reused_id_is_a_dead_letter_and_a_true_duplicate_is_acked_without_effect(handled):
    alone(delivery("m1", text="ten"))
    alone(delivery("m2", text="twenty"))

    decisions = decide_batch(
        [delivery("m1", text="eleven"), delivery("m2", text="twenty"), delivery("m3", text="thirty")]
    )

    assert [(d.outcome, d.reason) for d in decisions] == [
        (Outcome.DEAD_LETTER, "message_id_reused"),
        (Outcome.DUPLICATE, ""),
        (Outcome.HANDLED, ""),
    ]
    assert handled == [("m1", "ten"), ("m2", "twenty"), ("m3", "thirty")]


def test_one_id_twice_in_a_batch_with_other_content_runs_the_first_and_dead_letters_the_second(handled):
    decisions = decide_batch([delivery("m1", text="ten"), delivery("m1", text="ten"), delivery("m1", text="twelve")])

    assert [(d.outcome, d.reason) for d in decisions] == [
        (Outcome.HANDLED, ""),
        (Outcome.DUPLICATE, ""),
        (Outcome.DEAD_LETTER, "message_id_reused"),
    ]
    assert handled == [("m1", "ten")]
    assert InboxMessage.objects.get(message_id="m1").content_hash == decisions[0].event.content_hash


def test_the_savepoint_pass_tells_a_reused_id_from_a_duplicate_too(handled):
    alone(delivery("m1", text="ten"))

    # a failing member sends the whole batch through the savepoint pass
    decisions = decide_batch(
        [
            delivery("m0", text="one", behaviour="fails"),
            delivery("m1", text="ten"),
            delivery("m1", text="thirteen"),
            delivery("m2", text="twenty"),
            delivery("m2", text="twenty-one"),
        ]
    )

    assert [(d.outcome, d.reason) for d in decisions] == [
        (Outcome.RETRY, "handler_error"),
        (Outcome.DUPLICATE, ""),
        (Outcome.DEAD_LETTER, "message_id_reused"),
        (Outcome.HANDLED, ""),
        (Outcome.DEAD_LETTER, "message_id_reused"),
    ]
    assert sorted(handled) == [("m1", "ten"), ("m2", "twenty")]


def test_an_inbox_row_of_a_release_before_content_hashes_can_only_say_duplicate(handled):
    alone(delivery("m1", text="ten"))
    InboxMessage.objects.filter(message_id="m1").update(content_hash="")

    assert alone(delivery("m1", text="ninety-nine")).outcome is Outcome.DUPLICATE
