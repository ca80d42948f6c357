"""A message id handled before arrives again: a duplicate when its content is the same, a dead
letter ``message_id_reused`` naming both contents' hashes when it is not (seed 003's request
hash), on every path a delivery can take: alone, in a batch, twice in one batch, in savepoints."""

import json

import pytest
from django.db import transaction
from reliable_messaging import _registry as registry
from reliable_messaging._dispatch import Delivery, Outcome, decide, decide_batch
from reliable_messaging.models import InboxMessage

pytestmark = pytest.mark.django_db(transaction=True)

EVENT = "orders.order.created"


def delivery(message_id: str, *, total: str, behaviour: str = "ok") -> Delivery:
    return Delivery(
        consumer="payments",
        body=json.dumps({"order_id": message_id, "total": total, "behaviour": behaviour}).encode(),
        properties={"message_id": message_id, "correlation_id": message_id},
        headers={"event_type": EVENT, "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"},
        routing_key=EVENT,
    )


@pytest.fixture
def handled(monkeypatch) -> list[tuple[str, str]]:
    """A test handler for payments' orders.order.created; returns (order id, total) of each commit."""
    ran: list[tuple[str, str]] = []

    def handler(event) -> None:
        payload = event.payload
        transaction.on_commit(lambda: ran.append((payload["order_id"], payload["total"])))
        if payload["behaviour"] == "fails":
            raise RuntimeError("the gateway said no")

    monkeypatch.setitem(registry._handlers, "payments", {EVENT: registry.HandlerSpec("payments", EVENT, handler, (1,))})
    return ran


def alone(d: Delivery):
    return decide(d.consumer, body=d.body, properties=d.properties, headers=d.headers, routing_key=d.routing_key)


def test_the_same_id_and_content_again_is_a_duplicate_and_other_content_a_dead_letter_naming_both_hashes(handled):
    first = alone(delivery("m1", total="10.00"))

    again = alone(delivery("m1", total="10.00"))
    reused = alone(delivery("m1", total="99.00"))

    assert (first.outcome, again.outcome, reused.outcome) == (Outcome.HANDLED, Outcome.DUPLICATE, Outcome.DEAD_LETTER)
    stored = InboxMessage.objects.get(consumer="payments", message_id="m1").content_hash
    assert stored == first.event.content_hash != reused.event.content_hash
    assert reused.reason == "message_id_reused"
    assert reused.error == (
        f"payments handled message m1 with content sha256 {stored}; "
        f"this delivery's content is sha256 {reused.event.content_hash}"
    )
    assert handled == [("m1", "10.00")]


def test_in_a_batch_a_reused_id_is_a_dead_letter_and_a_true_duplicate_is_acked_without_effect(handled):
    alone(delivery("m1", total="10.00"))
    alone(delivery("m2", total="20.00"))

    decisions = decide_batch(
        [delivery("m1", total="11.00"), delivery("m2", total="20.00"), delivery("m3", total="30.00")]
    )

    assert [(d.outcome, d.reason) for d in decisions] == [
        (Outcome.DEAD_LETTER, "message_id_reused"),
        (Outcome.DUPLICATE, ""),
        (Outcome.HANDLED, ""),
    ]
    assert handled == [("m1", "10.00"), ("m2", "20.00"), ("m3", "30.00")]


def test_one_id_twice_in_a_batch_with_other_content_runs_the_first_and_dead_letters_the_second(handled):
    decisions = decide_batch(
        [delivery("m1", total="10.00"), delivery("m1", total="10.00"), delivery("m1", total="12.00")]
    )

    assert [(d.outcome, d.reason) for d in decisions] == [
        (Outcome.HANDLED, ""),
        (Outcome.DUPLICATE, ""),
        (Outcome.DEAD_LETTER, "message_id_reused"),
    ]
    assert handled == [("m1", "10.00")]
    assert InboxMessage.objects.get(message_id="m1").content_hash == decisions[0].event.content_hash


def test_the_savepoint_pass_tells_a_reused_id_from_a_duplicate_too(handled):
    alone(delivery("m1", total="10.00"))

    # a failing member sends the whole batch through the savepoint pass
    decisions = decide_batch(
        [
            delivery("m0", total="1.00", behaviour="fails"),
            delivery("m1", total="10.00"),
            delivery("m1", total="13.00"),
            delivery("m2", total="20.00"),
            delivery("m2", total="21.00"),
        ]
    )

    assert [(d.outcome, d.reason) for d in decisions] == [
        (Outcome.RETRY, "handler_error"),
        (Outcome.DUPLICATE, ""),
        (Outcome.DEAD_LETTER, "message_id_reused"),
        (Outcome.HANDLED, ""),
        (Outcome.DEAD_LETTER, "message_id_reused"),
    ]
    assert sorted(handled) == [("m1", "10.00"), ("m2", "20.00")]


def test_an_inbox_row_of_a_release_before_content_hashes_can_only_say_duplicate(handled):
    alone(delivery("m1", total="10.00"))
    InboxMessage.objects.filter(message_id="m1").update(content_hash="")

    assert alone(delivery("m1", total="99.00")).outcome is Outcome.DUPLICATE
