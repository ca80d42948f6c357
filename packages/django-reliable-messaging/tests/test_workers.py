"""The relay and the consumers as a project runs them: real processes, the test database and the
test broker (RabbitMQ when BROKER_URL names one, else the embedded broker in its default folder)."""

import json
import os

import pytest
from archive.models import Filed, Refusal
from notes.services import write_note
from reliable_messaging.models import DeadLetter, InboxMessage, OutboxMessage

from conftest import amqp


def event_types() -> list[str]:
    return list(OutboxMessage.objects.order_by("id").values_list("event_type", flat=True))


def test_a_note_is_relayed_filed_once_and_answered(manage, workdir):
    note = write_note("hello")

    relayed = manage("run_outbox_relay", "--once")
    consumed = manage("run_consumers", "--once")

    assert list(Filed.objects.values_list("note_id", "text")) == [(note.id, "hello")]
    assert event_types() == ["notes.note.written", "archive.note.filed"]
    filed = OutboxMessage.objects.get(event_type="archive.note.filed")
    written = OutboxMessage.objects.get(event_type="notes.note.written")
    assert (filed.payload, filed.causation_id, filed.correlation_id) == (
        {"note_id": str(note.id), "filed": 1},
        str(written.event_id),
        str(note.id),
    )
    assert list(InboxMessage.objects.values_list("consumer", "message_id")) == [("archive", str(written.event_id))]
    assert OutboxMessage.objects.filter(published_at__isnull=True).count() == 1  # the answer, not yet relayed
    if not amqp():
        assert (workdir / "var" / "broker" / "data").is_dir()  # the default folder, in the working directory
    # What a worker says with no LOGGING in the project: a start line, then a line per message.
    assert "relay started" in relayed.stderr and "relayed a batch claimed=1 published=1" in relayed.stderr
    assert "consuming consumers=['archive', 'errands'] queues=['archive_queue', 'errands_queue']" in consumed.stderr
    assert (
        f"INFO reliable_messaging.consumer: handled consumer=archive event_type=notes.note.written "
        f"message_id={written.event_id} correlation_id={note.id}"
    ) in consumed.stderr


def test_the_broker_password_never_reaches_the_log(manage):
    if not amqp():
        pytest.skip("only RabbitMQ's URL carries a password")
    password = os.environ["BROKER_URL"].split("@")[0].rsplit(":", 1)[1]
    relayed = manage("run_outbox_relay", "--once")
    consumed = manage("run_consumers", "--once")

    assert f":{password}@" not in relayed.stderr + consumed.stderr
    assert "broker=amqp://" in relayed.stderr and "broker=amqp://" in consumed.stderr


def test_verbosity_zero_keeps_only_warnings(manage):
    write_note("quiet")
    assert manage("run_outbox_relay", "--once", "-v", "0").stderr == ""
    assert manage("run_consumers", "--once", "-v", "0").stderr == ""
    assert Filed.objects.count() == 1


def test_a_redelivery_has_no_second_effect(manage):
    write_note("once")
    manage("run_outbox_relay", "--once")
    manage("run_consumers", "--once")
    # The relay sends the same message again (a confirm lost before the row was marked).
    OutboxMessage.objects.filter(event_type="notes.note.written").update(published_at=None)

    manage("run_outbox_relay", "--once")
    consumed = manage("run_consumers", "--once")

    assert Filed.objects.count() == 1
    assert event_types() == ["notes.note.written", "archive.note.filed"]
    assert "duplicate: already handled, acked without effect" in consumed.stderr


def test_a_refused_message_is_a_dead_letter_replayed_after_the_fix_then_purged(manage):
    Refusal.objects.create(text="not yet")
    note = write_note("not yet")
    manage("run_outbox_relay", "--once")
    manage("run_consumers", "--once")

    (letter,) = DeadLetter.objects.all()
    written = OutboxMessage.objects.get(event_type="notes.note.written")
    assert (letter.consumer, letter.reason, letter.message_id, letter.correlation_id) == (
        "archive",
        "invalid_payload",
        str(written.event_id),
        str(note.id),
    )
    assert list(Filed.objects.values_list("text", flat=True)) == []  # the text says whose, if one is
    listed = manage("dead_letters", "list", "--json").stdout.splitlines()
    assert [json.loads(line)["correlation_id"] for line in listed] == [str(note.id)]
    assert manage("dead_letters", "list").stdout.splitlines()[0].split() == [
        "id", "consumer", "correlation", "message_id", "reason", "state",
    ]  # fmt: skip

    Refusal.objects.all().delete()  # the fix
    replayed = manage("dead_letters", "replay", str(letter.pk))
    manage("run_consumers", "--once")

    assert "replayed" in replayed.stdout
    assert list(Filed.objects.values_list("text", flat=True)) == ["not yet"]
    letter.refresh_from_db()
    assert (letter.replay_count, letter.replayed_at is not None) == (1, True)
    assert manage("dead_letters", "purge", str(letter.pk)).returncode == 0
    assert DeadLetter.objects.count() == 0
    assert manage("purge_messages").stdout.strip() == "deleted: outbox 0, inbox 0, event log 0, dead letters 0"


def test_metrics_on_a_port_without_the_extra_say_what_to_install(manage):
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("prometheus_client is installed here (the extra 'metrics')")
    refused = manage("run_consumers", "--once", "--metrics-port", "9899", ok=False)

    assert refused.returncode == 1
    assert (
        "CommandError: metrics on port 9899 need prometheus_client: pip install 'django-reliable-messaging[metrics]'"
    ) in refused.stderr
