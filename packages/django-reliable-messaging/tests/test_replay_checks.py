"""Replay checks what it replays: with PRODUCERS (a broker user per context) a replay goes out
under this deployment's own user, which its consumer accepts, so ``dead_letters replay`` first
makes the consumer's producer check on the producer recorded with the dead letter (the AMQP
``user_id`` it was delivered with) and refuses, naming both, one that fails it. Without PRODUCERS
nothing changes."""

import json
import uuid

from archive.models import Filed
from reliable_messaging import _broker as broker
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging.models import DeadLetter, InboxMessage

PRODUCERS = {"PRODUCERS": {"notes": "notes_user", "archive": "archive_user"}, "BROKER_USER": "archive_user"}


def letter(text: str, user_id: str | None) -> DeadLetter:
    """A note the archive dead-lettered, delivered with ``user_id`` (None: without one)."""
    note_id = str(uuid.uuid4())
    properties = {"message_id": str(uuid.uuid4()), "correlation_id": note_id, "user_id": user_id}
    return dead_letter_record(
        consumer="archive",
        body=json.dumps({"note_id": note_id, "text": text}).encode(),
        properties={k: v for k, v in properties.items() if v is not None},
        headers={"event_type": "notes.note.written", "schema_version": 1},
        routing_key="notes.note.written",
        reason="handler_error",
        error="OperationalError: the archive was down",
    )


def test_replay_refuses_a_dead_letter_whose_recorded_producer_fails_the_check(manage, with_settings):
    genuine, forged, anonymous = letter("genuine", "notes_user"), letter("forged", "mallory"), letter("anon", None)
    assert (genuine.properties["user_id"], "user_id" in anonymous.properties) == ("notes_user", False)
    with broker.connect() as connection:  # as an administrator does once: a context's user declares its queues only
        connection.connect()
        broker.declare_topology(connection, whole=True)
    checked = with_settings(**PRODUCERS)
    assert "producer         mallory" in checked("dead_letters", "show", str(forged.pk)).stdout.splitlines()

    replay = checked("dead_letters", "replay", "--all", ok=False)

    refused = "NOT replayed: its producer is not accepted: notes.note.written belongs to notes, whose broker user is"
    assert replay.returncode == 1, replay.stderr
    assert replay.stdout.splitlines() == [
        f"{genuine.pk}\tarchive\t{genuine.message_id}\treplayed",
        f"{forged.pk}\tarchive\t{forged.message_id}\t{refused} 'notes_user'; this message's user_id is 'mallory' "
        "(recorded when it was dead-lettered)",
        f"{anonymous.pk}\tarchive\t{anonymous.message_id}\t{refused} 'notes_user'; this message's user_id is None "
        "(recorded when it was dead-lettered)",
    ]
    assert dict(DeadLetter.objects.values_list("pk", "replay_count")) == {genuine.pk: 1, forged.pk: 0, anonymous.pk: 0}
    # only the genuine one went back to the queue (consumed here without the check, which would
    # refuse anything the embedded broker carries: it has no user_id)
    manage("run_consumers", "--once")
    assert list(Filed.objects.values_list("text", flat=True)) == ["genuine"]
    assert list(InboxMessage.objects.values_list("message_id", flat=True)) == [genuine.message_id]


def test_without_producers_a_replay_is_not_checked(manage):
    forged = letter("anyone's", "mallory")

    replay = manage("dead_letters", "replay", "--all")

    assert replay.stdout.splitlines() == [f"{forged.pk}\tarchive\t{forged.message_id}\treplayed"]
    manage("run_consumers", "--once")
    assert list(Filed.objects.values_list("text", flat=True)) == ["anyone's"]
