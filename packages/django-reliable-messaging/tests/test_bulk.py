"""Run handlers (reliable_messaging._runs): the bus hands a consumer's consecutive members whose
key names the same run handler to it in one call, in the batch's order, and a message decided
alone (a lone delivery, the savepoint pass after a run failed) as a run of one; what each
member's turn publishes names it as its cause."""

import json
import uuid

import pytest
from reliable_messaging import _batch_decisions as batch_decisions
from reliable_messaging import _registry as registry
from reliable_messaging import _runs as runs
from reliable_messaging._dispatch import Delivery, Outcome, decide_batch
from reliable_messaging.api import in_runs, in_turn, publish
from reliable_messaging.models import InboxMessage, OutboxMessage

pytestmark = pytest.mark.django_db(transaction=True)

WRITTEN, FILED = "notes.note.written", "archive.note.filed"
FAIL_IN_RUN = "the run handler gives up on this one"


def delivery(event_type: str, payload: dict, *, message_id: str | None = None) -> Delivery:
    note_id = payload["note_id"]
    return Delivery(
        consumer="archive",
        body=json.dumps(payload).encode(),
        properties={"message_id": message_id or f"msg-{uuid.uuid4()}", "correlation_id": note_id},
        headers={"event_type": event_type, "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"},
        routing_key=event_type,
    )


def written(note_id: str, text: str = "hello") -> dict:
    return {"note_id": note_id, "text": text}


def note_ids(count: int) -> list[str]:
    """Fresh note ids in the order a batch takes them (correlation id, then arrival)."""
    return sorted(str(uuid.uuid4()) for _ in range(count))


def caused(event_type: str) -> dict[str, str]:
    """aggregate id -> causation id of each ``event_type`` in the outbox."""
    return dict(OutboxMessage.objects.filter(event_type=event_type).values_list("aggregate_id", "causation_id"))


@pytest.fixture
def calls(monkeypatch) -> list:
    """The archive consumer's handlers swapped for recording ones: ``notes.note.written``'s takes
    runs (and fails when a note asks it to), ``archive.note.filed``'s takes one message."""
    seen: list = []

    def one(event) -> None:
        seen.append(("one", event.payload["note_id"]))

    @in_runs
    def many(events) -> None:
        seen.append(("many", [event.payload["note_id"] for event in events]))
        if any(event.payload["text"] == FAIL_IN_RUN for event in events):
            raise RuntimeError("the run handler gave up")
        for event in events:
            with in_turn(event):
                publish(
                    event_type=FILED,
                    aggregate_type="note",
                    aggregate_id=event.payload["note_id"],
                    payload={"note_id": event.payload["note_id"], "filed": 1},
                )

    specs = {
        WRITTEN: registry.HandlerSpec("archive", WRITTEN, many, (1,)),
        FILED: registry.HandlerSpec("archive", FILED, one, (1,)),
    }
    monkeypatch.setitem(registry._handlers, "archive", specs)
    return seen


def test_a_run_ends_where_a_member_with_another_handler_comes_and_order_is_kept(calls):
    a, b, c, d = note_ids(4)
    batch = [
        delivery(WRITTEN, written(d), message_id="msg-d"),
        delivery(FILED, {"note_id": c, "filed": 1}, message_id="msg-c"),
        delivery(WRITTEN, written(b), message_id="msg-b"),
        delivery(WRITTEN, written(a), message_id="msg-a"),
    ]

    decisions = decide_batch(batch)

    assert [d.outcome for d in decisions] == [Outcome.HANDLED] * 4
    assert calls == [("many", [a, b]), ("one", c), ("many", [d])]
    # What each member's turn published names that member as its cause.
    assert caused(FILED) == {a: "msg-a", b: "msg-b", d: "msg-d"}
    assert InboxMessage.objects.filter(consumer="archive").count() == 4


def test_a_crash_point_stands_between_any_two_handlers_of_a_batch_runs_included(calls, monkeypatch):
    """``consumer.<name>.between_handlers``, where crash tests SIGKILL a batch: before each
    handler's work but the first, whether it is a run's, a run's next turn or a single one's."""
    reached: list[tuple[str, list]] = []
    for module in (batch_decisions, runs):
        monkeypatch.setattr(module, "fault_point", lambda name: reached.append((name, list(calls))))
    a, b, c, d = note_ids(4)
    batch = [
        delivery(WRITTEN, written(a)),
        delivery(WRITTEN, written(b)),
        delivery(FILED, {"note_id": c, "filed": 1}),
        delivery(WRITTEN, written(d)),
    ]

    assert [d.outcome for d in decide_batch(batch)] == [Outcome.HANDLED] * 4

    between = [(name, done) for name, done in reached if name == "consumer.archive.between_handlers"]
    assert between == [
        ("consumer.archive.between_handlers", [("many", [a, b])]),  # a's turn done, b's next
        ("consumer.archive.between_handlers", [("many", [a, b])]),  # the single one next
        ("consumer.archive.between_handlers", [("many", [a, b]), ("one", c)]),  # the next run
    ]


def test_a_failing_run_leaves_each_member_to_a_run_of_one_and_only_the_failing_one_fails(calls):
    a, b = note_ids(2)
    batch = [delivery(WRITTEN, written(a), message_id="msg-a"), delivery(WRITTEN, written(b, FAIL_IN_RUN))]

    decisions = decide_batch(batch)

    assert [d.outcome for d in decisions] == [Outcome.HANDLED, Outcome.RETRY]
    assert decisions[1].error == "RuntimeError: the run handler gave up"
    assert calls == [("many", [a, b]), ("many", [a]), ("many", [b])]
    assert caused(FILED) == {a: "msg-a"}  # the run's rolled back; a's run of one committed
    assert list(InboxMessage.objects.filter(consumer="archive").values_list("message_id", flat=True)) == ["msg-a"]


def test_a_lone_message_goes_through_the_run_handler_as_a_run_of_one(calls):
    (a,) = note_ids(1)

    decisions = decide_batch([delivery(WRITTEN, written(a), message_id="msg-a")])

    assert [d.outcome for d in decisions] == [Outcome.HANDLED]
    assert calls == [("many", [a])]
    assert caused(FILED) == {a: "msg-a"}
    assert list(InboxMessage.objects.filter(consumer="archive").values_list("message_id", flat=True)) == ["msg-a"]
