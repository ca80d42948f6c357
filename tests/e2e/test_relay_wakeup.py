"""The relay wakes on NOTIFY (PostgreSQL), re-LISTENs after losing its connection, and claims
through the partial index."""

import psycopg
import pytest
from django.db import connection, transaction
from django.utils import timezone
from reliable_messaging._relay import APPLICATION_NAME, NOTIFY_CHANNEL, _claim_sql
from reliable_messaging.api import publish
from reliable_messaging.models import OutboxMessage

from faultlib.processes import wait_until
from tests.conftest import ALL_DATABASES, database_url
from tests.support.outbox import unchecked_publishing

transactional = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

# Far longer than any wait below: a row relayed in time was relayed because of NOTIFY.
LONG_POLL = {"RELAY_POLL_INTERVAL": "30", "RELAY_PIPELINES": "1"}  # one loop: one LISTENing backend


def publish_one(n: int = 0) -> str:
    with unchecked_publishing(), transaction.atomic():
        return str(publish(event_type="test.thing.happened", payload={"n": n}, aggregate_type="thing", aggregate_id=n))


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


@transactional
def test_a_relay_with_a_long_poll_interval_publishes_a_new_row_when_notified(processes, quiet_broker):
    relay = processes.start("relay", "run_outbox_relay", env=LONG_POLL)
    wait_for_idle_relay()
    message_id = publish_one()
    wait_until(lambda: is_published(message_id), timeout=10, message="the row published on NOTIFY")
    assert processes.stop(relay) == 0


@transactional
def test_the_relay_listens_again_after_its_database_connection_is_killed(processes, quiet_broker):
    relay = processes.start("relay", "run_outbox_relay", env=LONG_POLL)
    old_pid = wait_for_idle_relay()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [old_pid])
        assert cursor.fetchone() == (True,)
    wait_for_idle_relay(exclude=(old_pid,))
    message_id = publish_one()
    wait_until(lambda: is_published(message_id), timeout=10, message="the row published on NOTIFY after reconnect")
    assert processes.stop(relay) == 0


@transactional
def test_a_transaction_writing_several_events_notifies_once():
    with psycopg.connect(database_url(), autocommit=True) as listener:
        listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        with unchecked_publishing(), transaction.atomic():
            for n in range(3):
                publish(event_type="test.thing.happened", payload={"n": n}, aggregate_type="thing", aggregate_id=n)
            assert list(listener.notifies(timeout=0.5)) == []  # nothing before the commit
        assert len(list(listener.notifies(timeout=2))) == 1


@transactional
def test_the_claim_reads_the_partial_index_with_many_published_rows():
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO messaging_outbox (event_id, source, aggregate_type, aggregate_id, event_type,
                schema_version, correlation_id, causation_id, traceparent, payload, created_at,
                published_at, attempts, last_error)
            SELECT gen_random_uuid(), 'test', 'thing', n::text, 'test.thing.happened', 1, n::text, '', '',
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
