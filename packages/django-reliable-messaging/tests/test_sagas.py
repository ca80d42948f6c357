"""The saga engine (reliable_messaging.sagas) on the test project's errand (errands/saga.py): moves
and their history, a race on the version, replies out of turn, deadlines sent again and given up
with compensation in reverse, step keys enforced at the participant, and a definition changed
with instances in flight."""

import uuid
from dataclasses import replace
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from errands.models import Chore, Missing
from errands.saga import ERRAND_V1, ERRAND_V2
from reliable_messaging import _registry as registry
from reliable_messaging import sagas
from reliable_messaging._declarations import DeclarationError, installed
from reliable_messaging._housekeeping import messages_purge
from reliable_messaging._saga_definitions import _registry
from reliable_messaging._saga_engine import versions_not_runnable
from reliable_messaging.api import IncomingEvent, TransientError, collecting, in_runs, write_collected
from reliable_messaging.models import OutboxMessage, SagaInstance, ScheduledMessage, StepKey
from reliable_messaging.testing import Outcome, advance_time, deliver

pytestmark = pytest.mark.django_db


def begin(errand: str = "e1", item: str = "pen") -> SagaInstance:
    with transaction.atomic():
        return sagas.start("errand", [(errand, {"item": item})], cause="test")[0]


def newest(event_type: str, errand: str = "e1") -> OutboxMessage:
    return OutboxMessage.objects.filter(event_type=event_type, correlation_id=errand).latest("id")


def run(event_type: str, errand: str = "e1", *, message_id: str | None = None):
    """Deliver the newest ``event_type`` of ``errand`` from the outbox to the errands' consumer."""
    row = newest(event_type, errand)
    return deliver(
        "errands", event_type, row.payload, message_id=message_id or str(row.event_id), correlation_id=errand
    )


def sent(errand: str = "e1") -> list[str]:
    return list(OutboxMessage.objects.filter(correlation_id=errand).order_by("id").values_list("event_type", flat=True))


def history(errand: str = "e1") -> list[tuple[str, str, str, int]]:
    saga = SagaInstance.objects.get(key=errand)
    return [(t.from_state, t.to_state, t.cause, t.version) for t in saga.transitions.order_by("version")]


def test_an_errand_runs_its_steps_each_move_once_with_its_history_and_no_deadline_left():
    begin()
    for command, reply in [
        ("errands.item.fetch", "errands.item.fetched"),
        ("errands.item.wrap", "errands.item.wrapped"),
        ("errands.item.deliver", "errands.item.delivered"),
    ]:
        assert run(command).outcome is Outcome.HANDLED
        assert run(reply).outcome is Outcome.HANDLED

    saga = SagaInstance.objects.get(key="e1")
    assert (saga.state, saga.version, saga.definition_version, saga.attempt, saga.deadline_id) == (
        "done",
        5,
        2,
        0,
        None,
    )
    assert saga.data == {}  # the item is kept only while fetching
    assert history() == [
        ("started", "fetching", "test", 2),
        ("fetching", "wrapping", "errands.item.fetched", 3),
        ("wrapping", "delivering", "errands.item.wrapped", 4),
        ("delivering", "done", "errands.item.delivered", 5),
    ]
    assert sent() == [
        "errands.item.fetch",
        "errands.item.fetched",
        "errands.item.wrap",
        "errands.item.wrapped",
        "errands.item.deliver",
        "errands.item.delivered",
        "errands.errand.done",
    ]
    assert newest("errands.item.fetch").payload == {
        "errand_id": "e1",
        "item": "pen",
        "key": saga.step_keys["errands.item.fetch"],
    }
    assert ScheduledMessage.objects.count() == 0  # each deadline cancelled by the reply
    assert Chore.objects.count() == 3


def test_a_second_start_changes_nothing():
    first = begin()
    again = begin(item="other")
    assert (again.pk, again.version, again.data) == (first.pk, 2, {"item": "pen"})
    assert sent() == ["errands.item.fetch"]


def test_the_loser_of_a_race_on_the_version_raises_transient_and_changes_nothing():
    stale = begin()
    run("errands.item.fetch")
    run("errands.item.fetched")  # moved to wrapping: version 3
    with pytest.raises(TransientError, match="moved meanwhile"), transaction.atomic():
        sagas.stop(stale, to="stopped", cause="test")
    saga = SagaInstance.objects.get(key="e1")
    assert (saga.state, saga.version, len(history())) == ("wrapping", 3, 2)


def test_duplicate_late_and_reordered_replies_change_nothing():
    begin()
    run("errands.item.fetch")
    reply = newest("errands.item.fetched")
    before = (sent(), history())
    early = deliver("errands", "errands.item.delivered", {"errand_id": "e1"}, correlation_id="e1")  # out of turn
    assert early.outcome is Outcome.HANDLED
    assert (sent(), history()) == before
    run("errands.item.fetched")
    after = (sent(), history())
    assert (
        deliver("errands", reply.event_type, reply.payload, message_id=str(reply.event_id)).outcome is Outcome.DUPLICATE
    )
    late = deliver("errands", "errands.item.fetched", {"errand_id": "e1"}, correlation_id="e1")  # another id
    assert late.outcome is Outcome.HANDLED
    assert (sent(), history()) == after
    assert deliver("errands", "errands.item.fetched", {"errand_id": "nobody"}).outcome is Outcome.HANDLED
    assert SagaInstance.objects.count() == 1


def test_a_deadline_sends_the_step_again_with_its_key_then_gives_it_up_and_compensates_in_reverse():
    begin()
    run("errands.item.fetch")
    run("errands.item.fetched")
    run("errands.item.wrap")
    run("errands.item.wrapped")  # delivering, attempt 1; nobody answers
    assert advance_time(timedelta(seconds=61)) == [
        ("errands.step.deadline", 1, {"errand_id": "e1", "step": "delivering", "attempt": 1})
    ]
    run("errands.step.deadline")
    delivers = OutboxMessage.objects.filter(event_type="errands.item.deliver").order_by("id")
    assert [m.payload["key"] for m in delivers] == [SagaInstance.objects.get().step_keys["errands.item.deliver"]] * 2
    assert SagaInstance.objects.get().attempt == 2
    advance_time(timedelta(seconds=61))
    run("errands.step.deadline")  # the second attempt's: given up

    saga = SagaInstance.objects.get()
    assert (saga.state, saga.failure_reason) == ("returning", "timeout")
    assert sent()[-3:] == ["errands.step.deadline", "errands.item.recall", "errands.item.return"]
    assert newest("errands.item.recall").payload == {"errand_id": "e1", "key": saga.step_keys["errands.item.recall"]}
    # A compensation is sent again at every deadline, never given up.
    for attempt in (1, 2, 3):
        advance_time(timedelta(seconds=61))
        run("errands.step.deadline")
        assert SagaInstance.objects.get().attempt == attempt + 1
    # An older attempt's deadline, delivered late, changes nothing.
    old = OutboxMessage.objects.filter(event_type="errands.step.deadline").order_by("id").first()
    assert deliver("errands", old.event_type, old.payload).outcome is Outcome.HANDLED
    assert SagaInstance.objects.get().attempt == 4
    run("errands.item.return")
    run("errands.item.returned")
    saga = SagaInstance.objects.get()
    assert (saga.state, saga.deadline_id) == ("failed", None)
    assert newest("errands.errand.failed").payload == {"errand_id": "e1", "reason": "timeout"}
    assert ScheduledMessage.objects.count() == 0
    assert [t[1] for t in history()] == [
        "fetching",
        "wrapping",
        "delivering",
        "delivering",
        "returning",
        "returning",
        "returning",
        "returning",
        "failed",
    ]


def test_a_command_repeated_with_its_step_key_has_no_second_effect_and_repeats_the_first_answer():
    begin()
    first = run("errands.item.fetch")
    assert [e.event_type for e in first.published] == ["errands.item.fetched"]
    answer = newest("errands.item.fetched")
    OutboxMessage.objects.filter(pk=answer.pk).update(published_at=timezone.now())  # the relay sent it
    outbox = OutboxMessage.objects.count()

    again = run("errands.item.fetch", message_id=str(uuid.uuid4()))  # the same step sent again: a new id

    assert (again.outcome, again.published) == (Outcome.HANDLED, [])
    assert Chore.objects.count() == 1
    assert OutboxMessage.objects.count() == outbox
    answer.refresh_from_db()
    assert answer.published_at is None  # sent again as it was, same message id
    assert StepKey.objects.filter(event_type="errands.item.fetch").count() == 1
    # The host has it already: its inbox takes the repeat as a duplicate.
    run("errands.item.fetched")
    assert run("errands.item.fetched").outcome is Outcome.DUPLICATE
    assert SagaInstance.objects.get().state == "wrapping"


def given_up_delivering() -> tuple[SagaInstance, OutboxMessage]:
    """An errand whose delivery was sent, never answered and given up (its recall sent); the
    delivery as sent, still to arrive."""
    begin()
    for message in ("errands.item.fetch", "errands.item.fetched", "errands.item.wrap", "errands.item.wrapped"):
        run(message)
    for _ in range(2):  # delivering has two attempts
        advance_time(timedelta(seconds=61))
        run("errands.step.deadline")
    saga = SagaInstance.objects.get()
    assert (saga.state, sent()[-2:]) == ("returning", ["errands.item.recall", "errands.item.return"])
    assert (
        saga.step_keys["errands.item.recall"] == saga.step_keys["errands.item.deliver"]
    )  # the undo's key is its step's
    return saga, newest("errands.item.deliver")


def statements(action) -> list[str]:
    """What ``action`` ran in a transaction of its own, each statement by its first words."""
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        action()
    return [" ".join(q["sql"].split()[:3]).replace('"', "") for q in queries.captured_queries]


def test_a_start_and_a_move_are_a_statement_per_write_and_no_savepoint():
    """The orchestrated saga's pace is in these: every reply is a move (docs/benchmarks.md, figure 12)."""
    started = statements(lambda: sagas.start("errand", [("e1", {"item": "pen"})], cause="test"))
    run("errands.item.fetch")
    moved = statements(lambda: sagas.reply("errand", [sagas.Reply("e1", "errands.item.fetched")]))

    assert started == [
        "INSERT INTO messaging_saga",
        "INSERT INTO messaging_outbox",  # the first step's command
        "INSERT INTO messaging_scheduled",  # its deadline
        "UPDATE messaging_saga SET",
        "INSERT INTO messaging_saga_transition",
    ]
    assert moved == [
        "SELECT messaging_saga.id, messaging_saga.name,",
        "INSERT INTO messaging_outbox",  # the next step's command
        "INSERT INTO messaging_scheduled",  # its deadline
        "DELETE FROM messaging_scheduled",  # the deadline of the step it leaves
        "UPDATE messaging_saga SET",
        "INSERT INTO messaging_saga_transition",
    ]


def test_a_run_of_starts_and_replies_costs_what_one_does_each_move_as_if_alone():
    """As in a consumer's batch (its commands collected for one insert): three errands started,
    then their replies, each run in the statements of one; each errand as if moved alone."""
    errands = ["e1", "e2", "e3"]

    def in_a_batch(action):
        with collecting() as published:
            action()
        write_collected(published)

    started = statements(
        lambda: in_a_batch(lambda: sagas.start("errand", [(e, {"item": e}) for e in errands], cause="test"))
    )
    for errand in errands:
        run("errands.item.fetch", errand)
    replies = [sagas.Reply(e, "errands.item.fetched") for e in errands]
    moved = statements(lambda: in_a_batch(lambda: sagas.reply("errand", replies)))

    assert started == [
        "INSERT INTO messaging_saga",
        "INSERT INTO messaging_scheduled",
        "UPDATE messaging_saga SET",
        "INSERT INTO messaging_saga_transition",
        "INSERT INTO messaging_outbox",
    ]
    assert moved == [
        "SELECT messaging_saga.id, messaging_saga.name,",
        "INSERT INTO messaging_scheduled",
        "DELETE FROM messaging_scheduled",
        "UPDATE messaging_saga SET",
        "INSERT INTO messaging_saga_transition",
        "INSERT INTO messaging_outbox",
    ]
    for errand in errands:
        assert sent(errand) == ["errands.item.fetch", "errands.item.fetched", "errands.item.wrap"]
        assert history(errand) == [
            ("started", "fetching", "test", 2),
            ("fetching", "wrapping", "errands.item.fetched", 3),
        ]
        saga = SagaInstance.objects.get(key=errand)
        assert (saga.state, saga.attempt, saga.version) == ("wrapping", 1, 3)
        assert list(ScheduledMessage.objects.filter(correlation_id=errand).values_list("event_id", flat=True)) == [
            saga.deadline_id
        ]


def test_a_run_that_loses_a_race_moves_none_of_its_instances():
    begin("e1")
    begin("e2")
    for errand in ("e1", "e2"):
        run("errands.item.fetch", errand)

    def moved_meanwhile(saga: SagaInstance) -> str:
        """Between the run's read and its write, another handler moves e2."""
        SagaInstance.objects.filter(key="e2").update(version=F("version") + 1)
        return ""

    replies = [sagas.Reply("e1", "errands.item.fetched"), sagas.Reply("e2", "errands.item.fetched", moved_meanwhile)]
    with pytest.raises(TransientError, match="moved meanwhile"), transaction.atomic():
        sagas.reply("errand", replies)

    assert [SagaInstance.objects.get(key=e).state for e in ("e1", "e2")] == ["fetching", "fetching"]
    assert sent("e1") == ["errands.item.fetch", "errands.item.fetched"]


def test_a_reply_twice_in_a_run_moves_its_instance_once():
    begin()
    run("errands.item.fetch")
    with transaction.atomic():
        instances = sagas.reply("errand", [sagas.Reply("e1", "errands.item.fetched")] * 2 + [sagas.Reply("e9", "x")])

    assert [i.state if i else None for i in instances] == ["wrapping", "wrapping", None]
    assert history() == [("started", "fetching", "test", 2), ("fetching", "wrapping", "errands.item.fetched", 3)]


def test_a_step_arriving_after_its_undo_runs_nothing_and_answers_nothing(caplog):
    saga, late = given_up_delivering()
    recall = newest("errands.item.recall")
    assert run("errands.item.recall").outcome is Outcome.HANDLED
    outbox = OutboxMessage.objects.count()

    arrived = deliver("errands", late.event_type, late.payload, message_id=str(late.event_id), correlation_id="e1")

    assert (arrived.outcome, arrived.published) == (Outcome.HANDLED, [])
    key = saga.step_keys["errands.item.deliver"]
    assert f"errands.item.deliver with step key {key} arrived after its undo errands.item.recall: nothing run" in (
        caplog.text
    )
    assert list(Chore.objects.order_by("id").values_list("command", flat=True)) == [
        "errands.item.fetch",
        "errands.item.wrap",
        "errands.item.recall",
    ]
    assert OutboxMessage.objects.count() == outbox
    assert set(StepKey.objects.filter(key=key).values_list("event_type", "message_id")) == {
        ("errands.item.recall", str(recall.event_id)),
        ("errands.item.deliver", str(recall.event_id)),  # the fence
    }


def test_a_participant_takes_a_run_its_keys_recorded_in_one_statement_and_a_repeat_in_it_runs_nothing():
    handed: list[list[str]] = []

    @sagas.participant(undoes="errands.item.deliver")
    @in_runs
    def recall(events: list[IncomingEvent]) -> None:
        handed.append([event.message_id for event in events])

    def command(message_id: str, key: str) -> IncomingEvent:
        payload = {"errand_id": "e1", sagas.STEP_KEY: key}
        return IncomingEvent(message_id=message_id, event_type="errands.item.recall", schema_version=1, payload=payload)

    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        recall([command("m1", "k1"), command("m2", "k2"), command("m3", "k1")])

    assert handed == [["m1", "m2"]]  # m3 repeats m1's key: not handed on
    step_keys = [" ".join(q["sql"].split()[:2]).replace('"', "") for q in queries if "messaging_step_key" in q["sql"]]
    assert step_keys == [
        "INSERT INTO",  # the run's keys
        "INSERT INTO",  # the fences of the firsts
        "SELECT messaging_step_key.message_id",  # the repeat's first
    ]
    recorded = StepKey.objects.values_list("event_type", "key", "message_id")
    assert sorted(recorded) == [
        ("errands.item.deliver", "k1", "m1"),
        ("errands.item.deliver", "k2", "m2"),
        ("errands.item.recall", "k1", "m1"),
        ("errands.item.recall", "k2", "m2"),
    ]


def test_an_undo_after_its_step_ran_undoes_it_and_a_repeat_of_the_step_repeats_its_answer():
    saga, late = given_up_delivering()
    assert [e.event_type for e in run("errands.item.deliver").published] == ["errands.item.delivered"]  # late, first
    OutboxMessage.objects.filter(event_type="errands.item.delivered").update(published_at=timezone.now())
    assert run("errands.item.recall").outcome is Outcome.HANDLED

    again = deliver("errands", late.event_type, late.payload, message_id=str(uuid.uuid4()), correlation_id="e1")

    assert (again.outcome, again.published) == (Outcome.HANDLED, [])
    assert list(Chore.objects.order_by("id").values_list("command", flat=True)) == [
        "errands.item.fetch",
        "errands.item.wrap",
        "errands.item.deliver",
        "errands.item.recall",
    ]
    key = saga.step_keys["errands.item.deliver"]
    assert StepKey.objects.get(event_type="errands.item.deliver", key=key).message_id == str(late.event_id)
    assert newest("errands.item.delivered").published_at is None  # the first answer, sent again


@pytest.mark.parametrize("deliver_handler", [None, "errands.handlers.on_reply"])
def test_an_undo_of_a_command_without_a_participant_handler_stops_the_start(deliver_handler):
    """A mistyped or unmarked step would leave its undo fencing nothing, silently: refused instead."""
    (errands,) = [d for d in installed() if d.name == "errands"]
    consumes = {k: v for k, v in errands.consumes.items() if k != "errands.item.deliver"}
    if deliver_handler:
        consumes["errands.item.deliver"] = deliver_handler  # a handler, not marked @participant
    with pytest.raises(DeclarationError) as refused:
        registry.register_declared(replace(errands, consumes=consumes))
    assert str(refused.value) == (
        "errands/context.toml: errands.item.recall's handler undoes 'errands.item.deliver': no @participant "
        "handler of it here (consumes, obeys)"
    )


def test_a_command_without_its_step_key_is_refused_and_changes_nothing():
    refused = deliver("errands", "errands.item.fetch", {"errand_id": "e9", "item": "pen"})
    assert (refused.outcome, refused.reason) == (Outcome.DEAD_LETTER, "invalid_payload")
    assert "carries no step key ('key')" in refused.error
    assert (Chore.objects.count(), StepKey.objects.count(), OutboxMessage.objects.count()) == (0, 0, 0)


def test_a_step_key_too_long_to_record_whole_is_refused_and_changes_nothing():
    refused = deliver("errands", "errands.item.fetch", {"errand_id": "e9", "item": "pen", "key": "k" * 101})
    assert (refused.outcome, refused.reason) == (Outcome.DEAD_LETTER, "invalid_payload")
    assert "step key is 101 characters, over 100" in refused.error
    assert (Chore.objects.count(), StepKey.objects.count(), OutboxMessage.objects.count()) == (0, 0, 0)


def test_a_missing_item_fails_the_errand_with_its_reason():
    Missing.objects.create(item="ink")
    begin(item="ink")
    run("errands.item.fetch")
    run("errands.item.missing")
    saga = SagaInstance.objects.get()
    assert (saga.state, saga.failure_reason) == ("failed", "missing")
    assert newest("errands.errand.failed").payload == {"errand_id": "e1", "reason": "missing"}


def test_an_end_before_the_start_leaves_a_tombstone_that_the_start_respects():
    with transaction.atomic():
        assert sagas.tombstone("errand", "e1", state="stopped") is True
        assert sagas.tombstone("errand", "e1", state="stopped") is False
    assert begin().state == "stopped"
    assert sent() == []
    with pytest.raises(ValueError, match="'fetching' is not a final state"), transaction.atomic():
        sagas.tombstone("errand", "e2", state="fetching")


def test_a_definition_changed_with_instances_in_flight_keeps_each_on_its_version(monkeypatch):
    monkeypatch.delitem(_registry, ("errand", 2))
    begin("old")  # started before the change: version 1
    monkeypatch.setitem(_registry, ("errand", 2), ERRAND_V2)
    begin("new")
    for errand in ("old", "new"):
        run("errands.item.fetch", errand)
        run("errands.item.fetched", errand)
    assert {s.key: (s.definition_version, s.state) for s in SagaInstance.objects.all()} == {
        "old": (1, "delivering"),  # version 1 has no wrapping
        "new": (2, "wrapping"),
    }
    assert versions_not_runnable() == []

    # A deployment that stopped registering version 1 is refused while "old" is in flight.
    monkeypatch.delitem(_registry, ("errand", 1))
    assert versions_not_runnable() == ["errand v1"]
    with pytest.raises(
        SystemCheckError, match=r"reliable_messaging.E001.*saga errand v1 has instances in flight in database .default."
    ):
        call_command("check", databases=["default"])
    run("errands.item.deliver", "old")
    failed = run("errands.item.delivered", "old")
    assert failed.outcome is Outcome.RETRY  # read again later; nothing changed
    assert "saga errand v1 is not registered" in failed.error
    assert SagaInstance.objects.get(key="old").state == "delivering"
    monkeypatch.setitem(_registry, ("errand", 1), ERRAND_V1)
    assert run("errands.item.delivered", "old").outcome is Outcome.HANDLED
    assert SagaInstance.objects.get(key="old").state == "done"
    monkeypatch.delitem(_registry, ("errand", 1))
    assert versions_not_runnable() == []  # nothing of version 1 in flight any more


def test_a_definition_that_cannot_run_is_refused():
    with pytest.raises(sagas.DefinitionError, match=r"fetching: a reply leads to 'nowhere', no state"):
        sagas.Definition(
            **{
                **ERRAND_V1.__dict__,
                "steps": {
                    "fetching": sagas.Step(
                        "errands.item.fetch", "errands", {"x": "nowhere"}, deadline=1, given_up="done"
                    )
                },
            }
        )
    with pytest.raises(sagas.DefinitionError, match="errand v1 is registered already, differently"):
        sagas.register(sagas.Definition(**{**ERRAND_V1.__dict__, "start": "delivering"}))


def test_step_keys_go_with_the_inbox_retention():
    begin()
    run("errands.item.fetch")
    StepKey.objects.update(handled_at=timezone.now() - timedelta(days=15))  # INBOX_RETENTION: 14 days
    messages_purge()
    assert StepKey.objects.count() == 0


def test_a_definition_is_drawn_as_a_mermaid_state_diagram():
    assert sagas.diagram(ERRAND_V1) == (
        "stateDiagram-v2\n"
        "    [*] --> fetching\n"
        "    fetching : errands.item.fetch to errands\n"
        "    fetching --> delivering : errands.item.fetched\n"
        "    fetching --> failed : errands.item.missing (missing)\n"
        "    fetching --> failed : unanswered after 2 sends, errands.item.return sent\n"
        "    delivering : errands.item.deliver to errands\n"
        "    delivering --> done : errands.item.delivered\n"
        "    delivering --> returning : errands.item.undeliverable (undeliverable)\n"
        "    delivering --> returning : unanswered after 2 sends, errands.item.recall sent\n"
        "    returning : errands.item.return to errands\n"
        "    returning --> failed : errands.item.returned\n"
        "    done : sends errands.errand.done\n"
        "    done --> [*]\n"
        "    failed : sends errands.errand.failed\n"
        "    failed --> [*]\n"
        "    stopped --> [*]\n"
        "    classDef compensation stroke-dasharray: 5 5\n"
        "    class returning compensation\n"
    )
