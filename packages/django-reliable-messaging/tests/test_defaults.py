"""The settings a project leaves out: the README's keys alone give a working bus, and a value of
the wrong kind stops the start naming the setting and its unit."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.utils import timezone
from notes.services import write_note
from reliable_messaging.models import InboxMessage, OutboxMessage

from conftest import amqp

pytestmark = pytest.mark.django_db


def purge() -> str:
    from io import StringIO

    out = StringIO()
    call_command("purge_messages", stdout=out)
    return out.getvalue().strip()


def handled(seconds_ago: float, message_id: str) -> InboxMessage:
    return InboxMessage.objects.create(
        consumer="archive", message_id=message_id, handled_at=timezone.now() - timedelta(seconds=seconds_ago)
    )


def test_purge_messages_keeps_each_kind_for_its_default_retention():
    write_note("kept")
    write_note("old")
    OutboxMessage.objects.filter(payload__text="kept").update(published_at=timezone.now() - timedelta(days=6))
    OutboxMessage.objects.filter(payload__text="old").update(published_at=timezone.now() - timedelta(days=8))
    handled(13 * 86400, "recent")
    handled(15 * 86400, "past")

    assert purge() == "deleted: outbox 1, inbox 1, event log 0, dead letters 0"
    assert [row.payload["text"] for row in OutboxMessage.objects.all()] == ["kept"]
    assert list(InboxMessage.objects.values_list("message_id", flat=True)) == ["recent"]


@pytest.mark.parametrize("retention", [14, 14.0, timedelta(seconds=14)])
def test_a_retention_is_a_timedelta_or_seconds(settings, retention):
    settings.MESSAGING = {**settings.MESSAGING, "INBOX_RETENTION": retention}
    handled(10, "within")
    handled(20, "past")

    assert purge() == "deleted: outbox 0, inbox 1, event log 0, dead letters 0"
    assert list(InboxMessage.objects.values_list("message_id", flat=True)) == ["within"]


@pytest.mark.parametrize("retention", ["14d", "14", None, 0, -5, True, timedelta(0)])
def test_a_retention_of_another_kind_is_refused_before_anything_is_deleted(settings, retention):
    settings.MESSAGING = {**settings.MESSAGING, "INBOX_RETENTION": retention}
    handled(30 * 86400, "old")

    with pytest.raises(ImproperlyConfigured) as refused:
        purge()

    assert str(refused.value) == (
        f"MESSAGING['INBOX_RETENTION'] is {retention!r}: give a positive timedelta or a number of seconds "
        "(14 days: timedelta(days=14) or 1209600)"
    )
    assert InboxMessage.objects.count() == 1


def test_a_process_does_not_start_with_a_retention_it_cannot_read(with_settings):
    started = with_settings(OUTBOX_RETENTION="7d")("check", ok=False)

    assert started.returncode == 1
    assert (
        "django.core.exceptions.ImproperlyConfigured: MESSAGING['OUTBOX_RETENTION'] is '7d': give a positive "
        "timedelta or a number of seconds (14 days: timedelta(days=14) or 1209600)"
    ) in started.stderr


def test_a_process_does_not_start_with_a_setting_the_bus_does_not_have(with_settings):
    started = with_settings(INBOX_RETENTON=86400)("check", ok=False)

    assert started.returncode == 1
    assert "ImproperlyConfigured: MESSAGING has no setting 'INBOX_RETENTON'" in started.stderr


def test_a_retention_under_a_day_is_warned_of_as_seconds(with_settings):
    checked = with_settings(INBOX_RETENTION=14)("check")

    assert "?: (reliable_messaging.W002) MESSAGING['INBOX_RETENTION'] is 0:00:14: shorter than a day" in checked.stderr
    assert "HINT: a number is seconds; for days give a timedelta (timedelta(days=14))" in checked.stderr
    assert "W001" not in checked.stderr


def test_the_embedded_broker_with_debug_off_is_warned_of(with_settings):
    if amqp():
        pytest.skip("only with the embedded broker (BROKER_URL unset)")
    checked = with_settings(debug=False)("check")

    assert (
        "?: (reliable_messaging.W001) MESSAGING['BROKER_URL'] is the embedded filesystem broker with DEBUG off"
    ) in checked.stderr
    assert with_settings(debug=True)("check").stderr == ""


@pytest.mark.parametrize("folder", ["str", "path"])
def test_the_embedded_broker_takes_its_folder_as_a_str_or_a_path(with_settings, workdir, folder, transactional_db):
    if amqp():
        pytest.skip("only with the embedded broker (BROKER_URL unset)")
    where = workdir / "elsewhere"
    manage = with_settings(FILESYSTEM_DIR=str(where) if folder == "str" else where)
    write_note("hello")

    manage("run_outbox_relay", "--once")
    manage("run_consumers", "--once")

    assert sorted(p.name for p in where.iterdir()) == ["control", "data"]
    assert not (workdir / "var").exists()
    assert [e.event_type for e in OutboxMessage.objects.order_by("id")] == ["notes.note.written", "archive.note.filed"]


def test_the_hosts_own_declaration_keys_are_read_with_their_defaults():
    from reliable_messaging.hosting import installed

    assert {d.name: d.extra for d in installed()} == {"notes": {"audited": True}, "archive": {}, "errands": {}}


@pytest.mark.parametrize(
    ("messaging", "refusal"),
    [
        ({"DECLARATION_KEYS": {}}, "notes/context.toml: unknown keys ['audited'] (a host's own keys: "),
        (
            {"DECLARATION_KEYS": {"audited": "no"}},
            "notes/context.toml: audited = True: a str, as MESSAGING['DECLARATION_KEYS'] has it",
        ),
        (
            {"EVENT_KINDS": ["outcome", "failure"]},
            "notes/context.toml: publishes 'notes.note.written': kind 'step' is not one of ['outcome', 'failure']",
        ),
    ],
)
def test_a_declaration_the_host_does_not_allow_stops_the_start(with_settings, messaging, refusal):
    started = with_settings(**messaging)("check", ok=False)

    assert started.returncode == 1
    assert f"reliable_messaging._declarations.DeclarationError: {refusal}" in started.stderr
