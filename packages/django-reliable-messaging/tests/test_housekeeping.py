"""Housekeeping that runs itself: the relay purges by the retentions every HOUSEKEEPING_INTERVAL,
dead letters too (waiting ones after DEAD_LETTER_RETENTION, replayed ones sooner), so a
deployment needs no cron; ``purge_messages`` does the same at once."""

import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from notes.services import write_note
from reliable_messaging.models import DeadLetter, DeadLetterFlood, EventLogEntry, InboxMessage, OutboxMessage

from conftest import HERE

pytestmark = pytest.mark.django_db(transaction=True)
DAY = timedelta(days=1)


def ago(delta: timedelta):
    return timezone.now() - delta


def past_and_within_each_retention() -> None:
    """One row of each kind just past its default retention, one just within."""
    write_note("kept")
    write_note("old")
    OutboxMessage.objects.filter(payload__text="kept").update(published_at=ago(6 * DAY))
    OutboxMessage.objects.filter(payload__text="old").update(published_at=ago(8 * DAY))
    for message_id, days in (("inbox-recent", 13), ("inbox-past", 15)):
        InboxMessage.objects.create(consumer="archive", message_id=message_id, handled_at=ago(days * DAY))
    for message_id, days in (("log-recent", 89), ("log-past", 91)):
        EventLogEntry.objects.create(
            message_id=message_id, event_type="notes.note.written", recorded_at=ago(days * DAY)
        )
    letters = [
        ("waiting-recent", 29 * DAY, None),
        ("waiting-past", 31 * DAY, None),
        ("replayed-recent", 31 * DAY, ago(6 * DAY)),  # replayed: its own, shorter retention counts
        ("replayed-past", 10 * DAY, ago(8 * DAY)),
    ]
    for message_id, failed, replayed in letters:
        DeadLetter.objects.create(
            consumer="archive",
            message_id=message_id,
            reason="handler_error",
            body=b"{}",
            last_failed_at=ago(failed),
            replayed_at=replayed,
        )
    for reason, days in (("undecodable_body", 29), ("unknown_event_type", 31)):  # a flood's counts
        window = ago(days * DAY)
        DeadLetterFlood.objects.create(consumer="archive", reason=reason, window_start=window, last_at=window)


def survivors() -> dict[str, list]:
    return {
        "outbox": sorted(OutboxMessage.objects.values_list("payload__text", flat=True)),
        "inbox": sorted(InboxMessage.objects.values_list("message_id", flat=True)),
        "event_log": sorted(EventLogEntry.objects.values_list("message_id", flat=True)),
        "dead_letters": sorted(DeadLetter.objects.values_list("message_id", flat=True)),
        "flood_counts": sorted(DeadLetterFlood.objects.values_list("reason", flat=True)),
    }


KEPT = {
    "outbox": ["kept"],
    "inbox": ["inbox-recent"],
    "event_log": ["log-recent"],
    "dead_letters": ["replayed-recent", "waiting-recent"],
    "flood_counts": ["undecodable_body"],
}


def test_purge_messages_purges_dead_letters_by_their_retentions():
    past_and_within_each_retention()
    from io import StringIO

    out = StringIO()
    call_command("purge_messages", stdout=out)
    assert out.getvalue().strip() == "deleted: outbox 1, inbox 1, event log 1, dead letters 2"
    assert survivors() == KEPT


def test_the_relay_keeps_house_on_its_own(manage):
    past_and_within_each_retention()
    relay = subprocess.Popen(
        [sys.executable, str(HERE / "manage.py"), "run_outbox_relay"],
        cwd=manage.cwd,
        env=manage.env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while survivors() != KEPT and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        relay.send_signal(signal.SIGTERM)
        _, log = relay.communicate(timeout=30)
    assert survivors() == KEPT
    assert "purged past their retention: outbox 1, inbox 1, event log 1, dead letters 2" in log
    assert relay.returncode == 0


def test_housekeeping_can_be_left_to_a_cron(with_settings, transactional_db):
    past_and_within_each_retention()
    relayed = with_settings(HOUSEKEEPING_INTERVAL=None)("run_outbox_relay", "--once")
    assert "purged" not in relayed.stderr
    assert len(survivors()["dead_letters"]) == 4
