"""On PostgreSQL the relay wakes on NOTIFY (one per transaction, sent at its commit), LISTENs again
after losing its connection, and claims through the partial index."""

import signal
import subprocess
import sys
import uuid

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone
from notes.services import write_note
from reliable_messaging._relay import APPLICATION_NAME, NOTIFY_CHANNEL, _claim_sql
from reliable_messaging.api import publish
from reliable_messaging.models import OutboxMessage

from conftest import HERE, database_url, wait_until

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY and partial indexes: PostgreSQL's"),
    pytest.mark.django_db(transaction=True),
]
# Far longer than any wait below: a row relayed in time was relayed because of NOTIFY.
LONG_POLL = {"RELAY_POLL_INTERVAL": 30, "RELAY_PIPELINES": 1}  # one loop: one LISTENing backend


@pytest.fixture
def relay(manage, with_settings):
    """``run_outbox_relay`` with a long poll interval, a process of its own; SIGTERM at the end."""
    started = []

    def start() -> subprocess.Popen:
        command = with_settings(**LONG_POLL)
        process = subprocess.Popen(
            [sys.executable, str(HERE / "manage.py"), "run_outbox_relay"],
            cwd=command.cwd,
            env=command.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)


def stop(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
    return process.returncode


def publish_one() -> str:
    write_note("hello")
    return str(OutboxMessage.objects.latest("id").event_id)


def is_published(message_id: str) -> bool:
    return OutboxMessage.objects.filter(event_id=message_id, published_at__isnull=False).exists()


def relay_backends() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            [APPLICATION_NAME],
        )
        return [pid for (pid,) in cursor.fetchall()]


def idle_relay_backends() -> list[int]:
    """Relay backends whose last statement closed an empty claim: LISTEN comes before the claim,
    so such a relay listens and waits for rows (a notification or its next poll, 30 s away)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s "
            "AND state = 'idle' AND query = 'COMMIT'",
            [APPLICATION_NAME],
        )
        return [pid for (pid,) in cursor.fetchall()]


def wait_for_idle_relay(exclude: tuple[int, ...] = ()) -> int:
    """The backend pid of the one relay, once it listens and waits for rows."""
    found: list[int] = []

    def waiting() -> bool:
        found[:] = [pid for pid in idle_relay_backends() if pid not in exclude]
        return len(found) == 1 and found == [pid for pid in relay_backends() if pid not in exclude]

    wait_until(waiting, timeout=30, interval=0.05, message="the relay to LISTEN and wait for rows")
    return found[0]


def test_a_relay_with_a_long_poll_interval_publishes_a_new_row_when_notified(relay):
    process = relay()
    wait_for_idle_relay()
    message_id = publish_one()
    wait_until(lambda: is_published(message_id), timeout=10, message="the row published on NOTIFY")
    assert stop(process) == 0


def test_the_relay_listens_again_after_its_database_connection_is_killed(relay):
    process = relay()
    old_pid = wait_for_idle_relay()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [old_pid])
        assert cursor.fetchone() == (True,)
    wait_for_idle_relay(exclude=(old_pid,))
    message_id = publish_one()
    wait_until(lambda: is_published(message_id), timeout=10, message="the row published on NOTIFY after reconnect")
    assert stop(process) == 0


def test_a_transaction_writing_several_events_notifies_once():
    with psycopg.connect(database_url(), autocommit=True) as listener:
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        with transaction.atomic():
            for n in range(3):
                publish(
                    event_type="notes.note.written",
                    payload={"note_id": str(uuid.uuid4()), "text": "hi"},
                    aggregate_type="note",
                    aggregate_id=n,
                )
            assert list(listener.notifies(timeout=0.5)) == []  # nothing before the commit
        assert len(list(listener.notifies(timeout=10, stop_after=1))) == 1  # at the commit
        assert list(listener.notifies(timeout=0.5)) == []  # and only one


def test_the_claim_reads_the_partial_index_with_many_published_rows():
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO messaging_outbox (event_id, source, aggregate_type, aggregate_id, event_type,
                schema_version, correlation_id, causation_id, traceparent, payload, created_at,
                published_at, attempts, last_error)
            SELECT gen_random_uuid(), 'notes', 'note', n::text, 'notes.note.written', 1, n::text, '', '',
                '{}'::jsonb, now() - interval '1 day' + n * interval '1 ms', now(), 0, ''
            FROM generate_series(1, 50000) AS n
            """
        )
        cursor.execute("ANALYZE messaging_outbox")
    publish_one()
    with transaction.atomic(), connection.cursor() as cursor:  # the text the relay runs
        cursor.execute("EXPLAIN " + _claim_sql(), [timezone.now(), 500])
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "outbox_pending_idx" in plan, plan
    assert "Seq Scan" not in plan, plan
