"""Redrive (issue 47, item 2): the waiting dead letters of a consumer, reason, event type and time
range (the filters combine), replayed in bounded batches through the one replay path; a dry run
says what would go and changes nothing; no filter at all needs --all."""

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from reliable_messaging import _dead_letters as dead_letters
from reliable_messaging._dead_letters import DeadLetterSelection, ReplayOutcome, dead_letter_edit, dead_letter_redrive
from reliable_messaging.management.commands.dead_letters import moment
from reliable_messaging.models import DeadLetter, DeadLetterEdit, InboxMessage
from test_dead_letter_edit import drained, letter, message_id_of, payload_of


def at(day: int, hour: int = 10) -> datetime:
    return datetime(2026, 11, day, hour, tzinfo=UTC)


def failed(dead: DeadLetter, when: datetime, consumer: str | None = None) -> DeadLetter:
    changes: dict[str, Any] = {"last_failed_at": when, "first_failed_at": when}
    if consumer:
        changes["consumer"] = consumer
    DeadLetter.objects.filter(pk=dead.pk).update(**changes)
    dead.refresh_from_db()
    return dead


@pytest.fixture
def letters() -> dict[str, DeadLetter]:
    """Six dead letters: five waiting (one of another consumer), one replayed."""
    made = {
        "a": failed(letter(reason="handler_error"), at(20)),
        "b": failed(letter(reason="handler_error"), at(21)),
        "c": failed(letter(reason="invalid_payload"), at(22)),
        "d": failed(letter(reason="handler_error", event_type="notes.note.erased"), at(22, 12)),
        "e": failed(letter(reason="handler_error"), at(21, 12), consumer="ledger"),
        "f": failed(letter(reason="handler_error"), at(21)),
    }
    DeadLetter.objects.filter(pk=made["f"].pk).update(replayed_at=at(23), replay_count=1)
    return made


def selected(letters: dict[str, DeadLetter], selection: DeadLetterSelection) -> tuple[list[str], Any]:
    names = {dead.pk: name for name, dead in letters.items()}
    seen: list[ReplayOutcome] = []
    report = dead_letter_redrive(selection, dry_run=True, on_outcome=seen.append)
    return [names[outcome.dead_letter_id] for outcome in seen], report


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        (DeadLetterSelection(), ["a", "b", "c", "d", "e"]),
        (DeadLetterSelection(consumer="archive"), ["a", "b", "c", "d"]),
        (DeadLetterSelection(consumer="ledger"), ["e"]),
        (DeadLetterSelection(reason="handler_error"), ["a", "b", "d", "e"]),
        (DeadLetterSelection(event_type="notes.note.erased"), ["d"]),
        (DeadLetterSelection(since=at(21, 0)), ["b", "c", "d", "e"]),
        (DeadLetterSelection(until=at(21, 0)), ["a"]),
        (DeadLetterSelection(since=at(21, 0), until=at(22, 0)), ["b", "e"]),
        (DeadLetterSelection(since=at(22), until=at(22, 12)), ["c"]),  # since inclusive, until exclusive
        (
            DeadLetterSelection(
                consumer="archive", reason="handler_error", event_type="notes.note.written", since=at(21, 0)
            ),
            ["b"],
        ),
        (DeadLetterSelection(reason="invalid_payload", event_type="notes.note.erased"), []),
    ],
)
def test_each_filter_selects_alone_and_they_combine(letters, selection, expected):
    names, report = selected(letters, selection)

    assert names == expected
    assert (report.matched, report.replayed, sum(report.refused.values())) == (len(expected), len(expected), 0)
    assert not DeadLetter.objects.filter(replayed_at__isnull=False).exclude(pk=letters["f"].pk).exists()


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("2026-11-21T00:00:00Z", at(21, 0)),
        ("2026-11-21T01:00:00+01:00", at(21, 0)),
        ("2026-11-21T00:00:00", at(21, 0)),  # no offset: UTC
        ("2026-11-21", at(21, 0)),
    ],
)
def test_since_and_until_are_iso_8601_and_utc_without_an_offset(given, meant):
    assert moment(given) == meant


@pytest.mark.django_db
@pytest.mark.usefixtures("workdir", "empty_queues")  # the test's own broker folder, or emptied queues
def test_a_redrive_replays_in_bounded_batches_an_edited_one_as_its_edit(letters, monkeypatch):
    edit = dead_letter_edit(letters["b"].pk, json.dumps({**payload_of(letters["b"]), "text": "fixed"}), by="ada",
                            via="admin")  # fmt: skip
    sizes: list[int] = []
    batches = dead_letters._batches

    def counted(queryset: Any, size: int) -> Any:
        for batch in batches(queryset, size):
            sizes.append(len(batch))
            yield batch

    monkeypatch.setattr(dead_letters, "_batches", counted)
    selection = DeadLetterSelection(consumer="archive", reason="handler_error")

    report = dead_letter_redrive(selection, batch_size=2)

    edit.refresh_from_db()
    assert (report.matched, report.replayed, dict(report.refused), sizes) == (3, 3, {}, [2, 1])
    sent = {message_id_of(m): m for m in drained()}
    assert set(sent) == {letters["a"].message_id, edit.replayed_as, letters["d"].message_id}
    assert json.loads(sent[edit.replayed_as].body)["text"] == "fixed"
    assert sorted(DeadLetter.objects.filter(replay_count=1).values_list("pk", flat=True)) == sorted(
        letters[name].pk for name in ("a", "b", "d", "f")
    )
    assert DeadLetter.objects.filter(replayed_at__isnull=True).count() == 2  # c and e, not selected


def test_a_dry_run_counts_by_group_and_changes_nothing(manage, letters):
    dry = manage("dead_letters", "redrive", "--reason", "handler_error", "--dry-run")

    assert dry.stdout.splitlines() == [
        "4 waiting dead letter(s) match (consumer, reason, event type):",
        "  1\tarchive\thandler_error\tnotes.note.erased",
        "  2\tarchive\thandler_error\tnotes.note.written",
        "  1\tledger\thandler_error\tnotes.note.written",
        "would replay 4, would refuse 0: dry run, nothing changed",
    ]
    assert list(DeadLetter.objects.order_by("pk").values_list("replay_count", flat=True)) == [0, 0, 0, 0, 0, 1]
    assert DeadLetter.objects.filter(replayed_at__isnull=False).count() == 1
    assert drained() == []


def test_a_redrive_reports_each_refusal_and_the_counts_and_exits_1(manage, letters):
    InboxMessage.objects.create(consumer="archive", message_id=letters["c"].message_id, handled_at=at(22, 13))

    done = manage(
        "dead_letters", "redrive", "--consumer", "archive", "--event-type", "notes.note.written",
        "--since", "2026-11-21T00:00:00Z", ok=False,
    )  # fmt: skip

    c = letters["c"]
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        f"{c.pk}\tarchive\t{c.message_id}\tNOT replayed: archive already handled this message at 2026-11-22 13:00:00: "
        "use --new-id to run it again",
        "2 waiting dead letter(s) match (consumer, reason, event type):",
        "  1\tarchive\thandler_error\tnotes.note.written",
        "  1\tarchive\tinvalid_payload\tnotes.note.written",
        "replayed 1, refused 1 (already_handled 1)",
    ]
    assert [message_id_of(m) for m in drained()] == [letters["b"].message_id]
    assert list(DeadLetter.objects.filter(replay_count=1).exclude(pk=letters["f"].pk).values_list("pk", flat=True)) == [
        letters["b"].pk
    ]


def test_redrive_wants_a_filter_or_all_and_times_it_can_read(manage, letters):
    cases = {
        (): "CommandError: name what to redrive (--consumer, --reason, --event-type, --since, --until), or --all "
        "for every waiting dead letter",
        ("--all", "--reason", "handler_error"): "CommandError: --all replays every waiting dead letter: give it no "
        "filter",
        ("--since", "yesterday"): "CommandError: 'yesterday' is not an ISO 8601 date and time (such as "
        "2026-11-24T17:00:00Z)",
        ("--since", "2026-11-22", "--until", "2026-11-21"): "CommandError: --since 2026-11-22 is not before --until "
        "2026-11-21: nothing could match",
    }
    for arguments, said in cases.items():
        done = manage("dead_letters", "redrive", *arguments, ok=False)
        assert (done.returncode, done.stderr.strip(), done.stdout) == (1, said, ""), arguments

    everything = manage("dead_letters", "redrive", "--all", "--dry-run")

    assert everything.stdout.splitlines()[0] == "5 waiting dead letter(s) match (consumer, reason, event type):"
    assert DeadLetterEdit.objects.count() == 0 and DeadLetter.objects.filter(replay_count=1).count() == 1
