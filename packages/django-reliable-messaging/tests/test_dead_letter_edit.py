"""A dead letter fixed in place (issue 47, item 2): its payload edited, checked against its schema
for its version as its consumer checks a message, recorded with who, when and the diff, then
replayed as a new message to its consumer only; the body as received is kept."""

import json
import os
import pwd
import subprocess
import sys
import uuid
from typing import Any

import pytest
from archive.models import Filed, Refusal
from reliable_messaging import _broker as broker
from reliable_messaging._dead_letters import (
    EditRefused,
    dead_letter_edit,
    dead_letter_payload_text,
    dead_letter_record,
    dead_letter_replay,
)
from reliable_messaging.models import DeadLetter, DeadLetterEdit, InboxMessage

from conftest import HERE, Manage

PRODUCERS = {"PRODUCERS": {"notes": "notes_user", "archive": "archive_user"}, "BROKER_USER": "archive_user"}


def letter(
    text: str = "too long",
    *,
    reason: str = "invalid_payload",
    event_type: str = "notes.note.written",
    user_id: str | None = None,
    extra: dict[str, Any] | None = None,
) -> DeadLetter:
    """A note the archive dead-lettered."""
    note_id = str(uuid.uuid4())
    properties = {"message_id": str(uuid.uuid4()), "correlation_id": note_id}
    if user_id:
        properties["user_id"] = user_id
    return dead_letter_record(
        consumer="archive",
        body=json.dumps({"note_id": note_id, "text": text, **(extra or {})}).encode(),
        properties=properties,
        headers={"event_type": event_type, "schema_version": 1, "causation_id": "cause-1"},
        routing_key=event_type,
        reason=reason,
        error="InvalidPayload: the archive refuses it",
    )


def payload_of(dead: DeadLetter) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(bytes(dead.body))
    return loaded


def drained(queue: str = "archive_queue") -> list[Any]:
    """Every message waiting in ``queue``, taken off it (kombu messages)."""
    from kombu import Queue

    taken = []
    with broker.connect() as connection:
        connection.connect()
        bound = Queue(queue)(connection.default_channel)
        while (message := bound.get(no_ack=True)) is not None:
            taken.append(message)
    return taken


def message_id_of(message: Any) -> str:
    return str(message.properties.get("message_id"))


def run(manage: Manage, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """``manage.py ...`` as a process with ``stdin`` piped in."""
    return subprocess.run(
        [sys.executable, str(HERE / "manage.py"), *args],
        cwd=manage.cwd,
        env=manage.env(),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.fixture
def bus(workdir: Any, empty_queues: None) -> Any:
    """The test's own broker folder (filesystem) or emptied queues (RabbitMQ)."""
    return workdir


# --- the service --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_edit_is_recorded_with_who_when_and_the_diff_and_the_body_as_received_is_kept():
    dead = letter("too long")
    received = bytes(dead.body)
    new = {**payload_of(dead), "text": "fixed"}

    edit = dead_letter_edit(dead.pk, json.dumps(new), by="ada", via="command")

    dead.refresh_from_db()
    assert bytes(dead.body) == received and dead.replayed_at is None
    assert list(DeadLetterEdit.objects.values_list("pk", "dead_letter_id", "edited_by", "via", "replayed_as")) == [
        (edit.pk, dead.pk, "ada", "command", "")
    ]
    assert edit.diff == [{"op": "replace", "path": "/text", "old": "too long", "new": "fixed"}]
    assert json.loads(bytes(edit.body)) == new
    assert edit.edited_at is not None and edit.replayed_at is None
    assert json.loads(dead_letter_payload_text(dead)) == new  # what a replay publishes now


@pytest.mark.django_db
def test_a_second_edit_is_diffed_against_the_first_and_is_the_one_a_replay_publishes():
    dead = letter("too long")
    first = dead_letter_edit(dead.pk, json.dumps({**payload_of(dead), "text": "one"}), by="ada", via="admin")

    second = dead_letter_edit(dead.pk, json.dumps({**payload_of(dead), "text": "two"}), by="bob", via="command")

    assert [e.pk for e in DeadLetterEdit.objects.filter(dead_letter=dead)] == [first.pk, second.pk]
    assert second.diff == [{"op": "replace", "path": "/text", "old": "one", "new": "two"}]
    assert json.loads(dead_letter_payload_text(dead))["text"] == "two"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("edited", "refusal"),
    [
        ({"text": ""}, "invalid_payload: notes.note.written v1 at text: '' should be non-empty"),
        ({"text": 7}, "invalid_payload: notes.note.written v1 at text: 7 is not of type 'string'"),
        ({"text": "x" * 201}, f"invalid_payload: notes.note.written v1 at text: '{'x' * 201}' is too long"),
        ({"note_id": "not-a-uuid"}, "invalid_payload: notes.note.written v1 at note_id: 'not-a-uuid' is not a 'uuid'"),
        (
            {"colour": "red"},
            "invalid_payload: notes.note.written v1 at (the payload): Additional properties are not allowed "
            "('colour' was unexpected)",
        ),
    ],
)
def test_an_edit_its_schema_refuses_names_the_field_and_changes_nothing(edited, refusal):
    dead = letter("too long")

    with pytest.raises(EditRefused) as refused:
        dead_letter_edit(dead.pk, json.dumps({**payload_of(dead), **edited}), by="ada", via="admin")

    assert str(refused.value) == refusal
    assert DeadLetterEdit.objects.count() == 0
    assert payload_of(DeadLetter.objects.get(pk=dead.pk))["text"] == "too long"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("text", "refusal"),
    [
        ('{"note_id": ', "the payload is not JSON: Expecting value: line 1 column 13 (char 12)"),
        ("[1, 2]", "the payload is not a JSON object (an event's payload is one): list"),
        ('{"note_id": NaN}', "the payload is not JSON: NaN is no JSON number"),
        ("", "the payload is not JSON: Expecting value: line 1 column 1 (char 0)"),
    ],
)
def test_a_payload_that_is_no_json_object_is_refused(text, refusal):
    dead = letter()

    with pytest.raises(EditRefused) as refused:
        dead_letter_edit(dead.pk, text, by="ada", via="admin")

    assert str(refused.value) == refusal
    assert DeadLetterEdit.objects.count() == 0


@pytest.mark.django_db
def test_an_unchanged_payload_a_replayed_and_a_purged_dead_letter_are_refused():
    dead, replayed = letter(), letter()
    DeadLetter.objects.filter(pk=replayed.pk).update(replayed_at="2026-11-24T17:34:28Z")
    same = json.dumps(payload_of(dead), indent=4)  # another layout of the same JSON

    with pytest.raises(EditRefused) as unchanged:
        dead_letter_edit(dead.pk, same, by="ada", via="admin")
    with pytest.raises(EditRefused) as was_replayed:
        dead_letter_edit(replayed.pk, json.dumps({**payload_of(replayed), "text": "x"}), by="ada", via="admin")
    with pytest.raises(EditRefused) as purged:
        dead_letter_edit(10**9, "{}", by="ada", via="admin")

    assert str(unchanged.value) == "the payload is unchanged: nothing to record"
    assert str(was_replayed.value) == (
        f"dead letter {replayed.pk} was replayed at 2026-11-24 17:34:28: only a waiting one is edited "
        "(a replay that fails again is a dead letter of its own)"
    )
    assert str(purged.value) == f"no dead letter {10**9}"
    assert DeadLetterEdit.objects.count() == 0


@pytest.mark.django_db
def test_an_edit_of_an_event_type_with_no_schema_here_is_refused():
    dead = letter(event_type="notes.note.erased")

    with pytest.raises(EditRefused) as refused:
        dead_letter_edit(dead.pk, json.dumps({**payload_of(dead), "text": "x"}), by="ada", via="admin")

    assert str(refused.value) == "no schema of notes.note.erased v1 is known here: an edit of it cannot be checked"


@pytest.mark.django_db
def test_a_sensitive_field_left_masked_keeps_its_value_and_the_audit_never_shows_it(settings):
    settings.MESSAGING = {**settings.MESSAGING, "SENSITIVE_FIELDS": ["text"]}
    dead = letter("tok_secret")
    shown = json.loads(dead_letter_payload_text(dead))
    assert shown["text"] == "tok_****"
    other_note = str(uuid.uuid4())

    kept = dead_letter_edit(dead.pk, json.dumps({**shown, "note_id": other_note}), by="ada", via="admin")
    changed = dead_letter_edit(dead.pk, json.dumps({**shown, "note_id": other_note, "text": "tok_new"}), by="ada",
                               via="admin")  # fmt: skip

    assert json.loads(bytes(kept.body)) == {"note_id": other_note, "text": "tok_secret"}
    assert kept.diff == [{"op": "replace", "path": "/note_id", "old": payload_of(dead)["note_id"], "new": other_note}]
    assert json.loads(bytes(changed.body))["text"] == "tok_new"
    assert changed.diff == [{"op": "replace", "path": "/text", "old": "tok_****", "new": "tok_****"}]


@pytest.mark.django_db
def test_an_edit_of_a_dead_letter_whose_producer_is_refused_is_refused(settings):
    forged = letter(user_id="mallory")
    settings.MESSAGING = {**settings.MESSAGING, **PRODUCERS}

    with pytest.raises(EditRefused) as refused:
        dead_letter_edit(forged.pk, json.dumps({**payload_of(forged), "text": "x"}), by="ada", via="admin")

    assert str(refused.value) == (
        "its producer is not accepted: notes.note.written belongs to notes, whose broker user is 'notes_user'; this "
        "message's user_id is 'mallory' (recorded when it was dead-lettered): it could never be replayed"
    )
    assert DeadLetterEdit.objects.count() == 0


@pytest.mark.django_db
def test_the_replay_of_an_edit_is_one_new_message_to_its_consumer_only(bus):
    dead = letter("too long")
    edit = dead_letter_edit(dead.pk, json.dumps({**payload_of(dead), "text": "fixed"}), by="ada", via="admin")

    [outcome] = dead_letter_replay(ids=[dead.pk])

    edit.refresh_from_db()
    dead.refresh_from_db()
    assert outcome.replayed and outcome.message_id == edit.replayed_as != dead.message_id
    assert outcome.note == f"edited (edit #{edit.pk}): as a new message {edit.replayed_as}"
    assert (dead.replay_count, dead.replayed_at is not None, edit.replayed_at is not None) == (1, True, True)
    [message] = drained("archive_queue")
    assert message_id_of(message) == edit.replayed_as
    assert json.loads(message.body) == {**payload_of(dead), "text": "fixed"}
    headers = message.headers
    assert (headers["x-replay-of"], headers["x-dead-letter-edit"], headers["x-replayed-from"]) == (
        dead.message_id,
        edit.pk,
        dead.pk,
    )
    assert (headers["event_type"], headers["schema_version"], headers["causation_id"]) == (
        "notes.note.written",
        1,
        "cause-1",
    )
    # replayed: it is not edited again (a replay that fails again is a dead letter of its own)
    with pytest.raises(EditRefused):
        dead_letter_edit(dead.pk, json.dumps({**payload_of(dead), "text": "again"}), by="ada", via="admin")


@pytest.mark.django_db
def test_an_edited_dead_letter_asked_to_keep_its_id_still_goes_as_a_new_message(bus):
    dead = letter("too long")
    edit = dead_letter_edit(dead.pk, json.dumps({**payload_of(dead), "text": "fixed"}), by="ada", via="admin")
    InboxMessage.objects.create(consumer="archive", message_id=dead.message_id)  # the original was handled

    [outcome] = dead_letter_replay(ids=[dead.pk], new_id=False)

    edit.refresh_from_db()
    assert outcome.replayed and outcome.message_id == edit.replayed_as != dead.message_id
    assert [message_id_of(m) for m in drained()] == [edit.replayed_as]


# --- the command ----------------------------------------------------------------------------------


def test_edit_from_a_file_prints_the_diff_then_replay_runs_the_edit_once(manage):
    dead = letter("refused text")
    Refusal.objects.create(text="refused text")
    (manage.cwd / "payload.json").write_text(json.dumps({**payload_of(dead), "text": "accepted text"}))

    edited = manage("dead_letters", "edit", str(dead.pk), "--payload-file", "payload.json", "--by", "ada")

    edit = DeadLetterEdit.objects.get()
    lines = edited.stdout.splitlines()
    assert lines[0].startswith(f"edit #{edit.pk} ") and lines[0].endswith(" by ada (via command)")
    assert lines[1:] == [
        '  ~ /text: "refused text" -> "accepted text"',
        f"its replay publishes this edit, as a new message: dead_letters replay {dead.pk}",
    ]
    replayed = manage("dead_letters", "replay", str(dead.pk))
    edit.refresh_from_db()
    assert replayed.stdout.splitlines() == [
        f"{dead.pk}\tarchive\t{edit.replayed_as}\treplayed: edited (edit #{edit.pk}): as a new message "
        f"{edit.replayed_as}"
    ]

    manage("run_consumers", "--once")

    assert list(Filed.objects.values_list("text", flat=True)) == ["accepted text"]
    assert list(InboxMessage.objects.values_list("consumer", "message_id")) == [("archive", edit.replayed_as)]
    assert list(DeadLetter.objects.values_list("pk", flat=True)) == [dead.pk]  # handled: no new dead letter
    shown = manage("dead_letters", "show", str(dead.pk)).stdout
    assert "edits:\n" in shown and '  ~ /text: "refused text" -> "accepted text"' in shown
    assert f"replayed as {edit.replayed_as} at " in shown


def test_edit_from_stdin_with_replay_and_the_os_user(manage):
    dead = letter("too long")

    done = run(manage, "dead_letters", "edit", str(dead.pk), "--replay",
               stdin=json.dumps({**payload_of(dead), "text": "short"}))  # fmt: skip

    assert done.returncode == 0, done.stderr
    edit = DeadLetterEdit.objects.get()
    os_user = pwd.getpwuid(os.getuid()).pw_name  # the process has no USER nor LOGNAME: its uid's name
    assert (edit.edited_by, edit.via, edit.replayed_as != "") == (os_user, "command", True)
    assert done.stdout.splitlines()[-1].startswith(f"{dead.pk}\tarchive\t{edit.replayed_as}\treplayed: edited")
    assert [message_id_of(m) for m in drained()] == [edit.replayed_as]


def test_a_refused_edit_exits_1_with_one_line_naming_the_field_and_changes_nothing(manage):
    dead = letter("too long")

    refused = run(manage, "dead_letters", "edit", str(dead.pk), stdin=json.dumps({**payload_of(dead), "text": ""}))
    missing = run(manage, "dead_letters", "edit", "999999", stdin="{}")

    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.strip().splitlines() == [
        f"CommandError: dead letter {dead.pk}: edit refused: invalid_payload: notes.note.written v1 at text: '' "
        "should be non-empty"
    ]
    assert (missing.returncode, missing.stderr.strip()) == (1, "CommandError: no dead letter 999999")
    assert DeadLetterEdit.objects.count() == 0
    assert DeadLetter.objects.get(pk=dead.pk).replayed_at is None


def test_edit_print_shows_the_payload_to_edit_and_changes_nothing(manage):
    dead = letter("too long")

    shown = manage("dead_letters", "edit", str(dead.pk), "--print")

    assert json.loads(shown.stdout) == payload_of(dead)
    assert DeadLetterEdit.objects.count() == 0


def test_the_producer_check_holds_for_an_edited_dead_letter(manage, with_settings):
    forged = letter("forged", user_id="mallory")
    edit = dead_letter_edit(forged.pk, json.dumps({**payload_of(forged), "text": "x"}), by="ada", via="admin")
    with broker.connect() as connection:  # as an administrator does once (test_replay_checks)
        connection.connect()
        broker.declare_topology(connection, whole=True)

    replay = with_settings(**PRODUCERS)("dead_letters", "replay", str(forged.pk), ok=False)

    assert replay.returncode == 1
    assert replay.stdout.splitlines() == [
        f"{forged.pk}\tarchive\t{forged.message_id}\tNOT replayed: its producer is not accepted: notes.note.written "
        "belongs to notes, whose broker user is 'notes_user'; this message's user_id is 'mallory' (recorded when it "
        "was dead-lettered)"
    ]
    edit.refresh_from_db()
    assert (edit.replayed_as, DeadLetter.objects.get(pk=forged.pk).replay_count) == ("", 0)
    assert drained() == []
