"""``manage.py dead_letters`` as an operator runs it: list (a table, or JSON lines), show (the
host's sensitive fields masked), replay (once per message id; ``--new-id`` for a message without
one or to run it again), purge; and the same message dead-lettered again updating its row."""

import json
import uuid

import pytest
from archive.models import Filed
from django.utils import timezone
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging.models import DeadLetter, InboxMessage

from conftest import amqp, drained


def note_letter(note_id: str, message_id: str | None) -> DeadLetter:
    return dead_letter_record(
        consumer="archive",
        body=json.dumps({"note_id": note_id, "text": "tok_secret words"}).encode(),
        properties={"message_id": message_id, "correlation_id": note_id} if message_id else {},
        headers={"event_type": "notes.note.written", "schema_version": 1, "x-attempt": 5},
        routing_key="notes.note.written",
        reason="handler_error",
        error="TransientError: the shelf is busy",
        attempts=5,
    )


@pytest.mark.slow  # a dozen manage.py processes
def test_list_show_replay_and_purge_dead_letters(manage, with_settings):
    empty = manage("dead_letters", "list", "--consumer", "archive")
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "no dead letters for archive\n", "")
    note_id, message_id = str(uuid.uuid4()), str(uuid.uuid4())
    letter = note_letter(note_id, message_id)
    anonymous = note_letter(str(uuid.uuid4()), None)

    # A table on stdout, header included (nothing on stderr); the correlation column is the note id.
    listing = manage("dead_letters", "list")
    ids = max(len("id"), len(str(anonymous.pk)))
    assert listing.stderr == ""
    assert listing.stdout.splitlines() == [
        f"{'id':<{ids}}  consumer  {'correlation':<36}  {'message_id':<36}  reason         state",
        f"{letter.pk:<{ids}}  archive   {note_id}  {message_id}  handler_error  waiting",
        f"{anonymous.pk:<{ids}}  archive   {'-':<36}  {'-':<36}  handler_error  waiting",
    ]
    scripted = manage("dead_letters", "list", "--json")
    assert [json.loads(line) for line in scripted.stdout.splitlines()] == [
        {
            "id": one.pk,
            "consumer": "archive",
            "correlation_id": correlation,
            "message_id": message,
            "event_type": "notes.note.written",
            "reason": "handler_error",
            "attempts": 5,
            "last_failed_at": one.last_failed_at.isoformat(),
            "replayed_at": None,
        }
        for one, correlation, message in ((letter, note_id, message_id), (anonymous, None, None))
    ]
    shown = with_settings(SENSITIVE_FIELDS=["text"])("dead_letters", "show", str(letter.pk)).stdout
    assert "tok_****" in shown and "tok_secret" not in shown
    assert "TransientError" in shown

    replay = manage("dead_letters", "replay", str(letter.pk))
    assert "replayed" in replay.stdout
    letter.refresh_from_db()
    assert manage("dead_letters", "list").stdout.splitlines()[1] == (
        f"{letter.pk:<{ids}}  archive   {note_id}  {message_id}  handler_error  "
        f"replayed {letter.replayed_at:%Y-%m-%d %H:%M:%S}"
    )
    waiting = manage("dead_letters", "list", "--waiting")
    assert waiting.stdout.splitlines() == [
        f"{'id':<{ids}}  consumer  correlation  message_id  reason         state",
        f"{anonymous.pk:<{ids}}  archive   -            -           handler_error  waiting",
    ]
    manage("run_consumers", "--once")
    assert [str(n) for n in Filed.objects.values_list("note_id", flat=True)] == [note_id]
    assert (letter.replay_count, letter.replayed_at is not None) == (1, True)

    # The same message again: the inbox remembers it, so the command refuses and says why.
    again = manage("dead_letters", "replay", str(letter.pk), ok=False)
    assert again.returncode == 1
    assert "already handled" in again.stdout
    # --new-id sends it again under an id of its own.
    manage("dead_letters", "replay", str(letter.pk), "--new-id")
    if amqp():
        [(resent_id, headers, _)] = drained("archive_queue")
        assert resent_id != message_id and headers["event_type"] == "notes.note.written"
    assert list(InboxMessage.objects.filter(consumer="archive").values_list("message_id", flat=True)) == [message_id]

    no_id = manage("dead_letters", "replay", str(anonymous.pk), ok=False)
    assert no_id.returncode == 1 and "--new-id" in no_id.stdout

    purged = manage("dead_letters", "purge", str(letter.pk), str(anonymous.pk))
    assert purged.stdout.strip() == "2 dead letter(s) purged"
    assert DeadLetter.objects.count() == 0


@pytest.mark.django_db
def test_the_same_message_dead_lettered_again_updates_its_row():
    message_id = str(uuid.uuid4())
    first = note_letter(str(uuid.uuid4()), message_id)
    DeadLetter.objects.filter(pk=first.pk).update(replayed_at=timezone.now())
    second = note_letter(str(uuid.uuid4()), message_id)

    assert second.pk == first.pk
    assert (second.attempts, second.replayed_at) == (10, None)
    assert DeadLetter.objects.count() == 1
