"""The PostgreSQL limits a long-running loop's connections start with (``WORKER_DATABASE_TIMEOUTS``),
and what they do to a consumer stuck behind someone else's lock."""

import time

import pytest
from archive.models import Filed
from django.db import connection, connections
from notes.services import write_note
from reliable_messaging.models import InboxMessage

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="session limits: PostgreSQL's")

LIMITS = ("lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout")
SHOW_LIMITS = f"""
from django.db import connection
with connection.cursor() as cursor:
    shown = []
    for name in {LIMITS!r}:
        cursor.execute("SHOW " + name)
        shown.append(cursor.fetchone()[0])
    print(*shown)
"""
DEDICATED = "from reliable_messaging._lifecycle import use_dedicated_connections\nuse_dedicated_connections()\n"
UNLIMITED = DEDICATED.replace("()", "(session_limits=False)")
TIMEOUTS = {"lock_timeout": 1.5, "statement_timeout": 60, "idle_in_transaction_session_timeout": 40}


def test_the_loops_connections_start_with_the_workers_limits(manage, with_settings):
    shown = with_settings(WORKER_DATABASE_TIMEOUTS=TIMEOUTS)("shell", "--no-imports", "-c", DEDICATED + SHOW_LIMITS)

    assert shown.stdout.splitlines() == ["1500ms 1min 40s"]


def test_without_session_limits_or_with_zero_limits_nothing_is_set(manage, with_settings):
    limited = with_settings(WORKER_DATABASE_TIMEOUTS=TIMEOUTS)
    unlimited = limited("shell", "--no-imports", "-c", UNLIMITED + SHOW_LIMITS)
    zeros = with_settings(WORKER_DATABASE_TIMEOUTS=dict.fromkeys(LIMITS, 0))(
        "shell",
        "--no-imports",
        "-c",
        DEDICATED + "from django.db import connection\nprint(connection.settings_dict['OPTIONS'].get('options'))",
    )

    assert unlimited.stdout.splitlines() == ["0 0 0"]
    assert zeros.stdout.splitlines() == ["None"]  # no libpq options at all: PgBouncer accepts the connection


def test_a_consumer_behind_a_stuck_lock_gives_up_after_lock_timeout_and_retries_later(manage, with_settings):
    """Someone else files the note first and never commits: the archive consumer's insert waits
    lock_timeout (1 s), not forever; the message goes to wait for its retry, nothing changes."""
    note = write_note("stuck")
    manage("run_outbox_relay", "--once")
    holder = connections.create_connection("default")
    try:
        holder.set_autocommit(False)
        with holder.cursor() as cursor:
            cursor.execute("INSERT INTO archive_filed (note_id, text) VALUES (%s, 'held')", [note.id])
        started = time.monotonic()
        consumed = with_settings(WORKER_DATABASE_TIMEOUTS={"lock_timeout": 1}, CONSUMER_RETRY_DELAYS=[60])(
            "run_consumers", "--once", timeout=60
        )
        took = time.monotonic() - started
    finally:
        holder.rollback()
        holder.close()

    retries = [line for line in consumed.stderr.splitlines() if "handler failed, retry 1 of 4" in line]
    assert len(retries) == 1, consumed.stderr
    assert "canceling statement due to lock timeout" in retries[0]
    print(f"run_consumers --once behind the lock: {took:.1f} s")
    assert took < 30  # without lock_timeout it would wait for the holder: forever
    assert not Filed.objects.exists()
    assert not InboxMessage.objects.filter(consumer="archive").exists()
