"""The PostgreSQL limits every long-running loop's and the web server's connections start with,
and what they do to a consumer stuck behind someone else's lock."""

import json
import time
import uuid

import psycopg
import pytest

from faultlib.broker import publish_raw
from faultlib.load import order_created_payload
from faultlib.saga import ledger
from payments.models import Payment
from tests.conftest import ALL_DATABASES, database_url

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

LIMITS = ("lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout")
SHOW_LIMITS = f"""
from django.db import connections
for alias in ("default", "gateway"):
    with connections[alias].cursor() as cursor:
        shown = []
        for name in {LIMITS!r}:
            cursor.execute("SHOW " + name)
            shown.append(cursor.fetchone()[0])
        print(alias, *shown)
"""


def shell(processes, code: str, env: dict | None = None):
    return processes.run("shell", "--no-imports", "-c", code, env=env, timeout=60)


def test_the_loops_connections_start_with_the_workers_limits(processes):
    result = shell(
        processes,
        "from reliable_messaging._lifecycle import use_dedicated_connections\nuse_dedicated_connections()\n"
        + SHOW_LIMITS,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["default 5s 15s 30s", "gateway 5s 15s 30s"]


def test_the_workers_limits_follow_their_settings(processes):
    env = {"WORKER_LOCK_TIMEOUT": "1.5", "WORKER_STATEMENT_TIMEOUT": "1m", "WORKER_IDLE_IN_TRANSACTION_TIMEOUT": "40"}
    result = shell(
        processes,
        "from reliable_messaging._lifecycle import use_dedicated_connections\nuse_dedicated_connections()\n"
        + SHOW_LIMITS,
        env,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["default 1500ms 1min 40s", "gateway 1500ms 1min 40s"]


def test_the_web_servers_connections_start_with_the_web_limits(processes):
    result = shell(processes, "import config.wsgi\n" + SHOW_LIMITS)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "default 0 20s 30s"


def test_the_deadline_loop_and_zero_limits_set_nothing(processes):
    deadline = shell(
        processes,
        "from reliable_messaging._lifecycle import use_dedicated_connections\n"
        "use_dedicated_connections(session_limits=False)\n" + SHOW_LIMITS,
    )
    web = shell(
        processes,
        "import config.wsgi\nfrom django.db import connection\n"
        "print(connection.settings_dict['OPTIONS'].get('options'))",
        {"WEB_STATEMENT_TIMEOUT": "0", "WEB_IDLE_IN_TRANSACTION_TIMEOUT": "0"},
    )

    assert deadline.returncode == 0, deadline.stderr
    assert deadline.stdout.splitlines() == ["default 0 0 0", "gateway 0 0 0"]
    assert web.returncode == 0, web.stderr
    assert web.stdout.splitlines() == ["None"]  # no libpq options at all: PgBouncer accepts the connection


def test_a_gateway_worker_that_would_never_try_a_charge_is_refused(processes):
    result = processes.run("check", env={"GATEWAY_CHARGE_ATTEMPTS": "0"}, timeout=60)

    assert result.returncode == 1
    assert result.stderr == "Configuration error: GATEWAY_CHARGE_ATTEMPTS must be at least 1, not 0\n"


def test_a_consumer_behind_a_stuck_lock_gives_up_after_lock_timeout_and_retries_later(processes, quiet_broker):
    """Someone holds the order's payment row and never lets go: the payments consumer waits
    WORKER_LOCK_TIMEOUT (1 s), not forever; the message goes to its delay queue, nothing changes."""
    order_id = str(uuid.uuid4())
    Payment.objects.create(order_id=order_id)
    message_id = str(uuid.uuid4())
    publish_raw(
        "orders.order.created",
        json.dumps(order_created_payload(order_id)).encode(),
        properties={"message_id": message_id, "correlation_id": order_id},
        headers={"event_type": "orders.order.created", "schema_version": 1, "occurred_at": "2026-01-01T00:00:00Z"},
    )

    with psycopg.connect(database_url()) as holder:
        holder.execute("SELECT 1 FROM payments_payment WHERE order_id = %s FOR UPDATE", [order_id])
        started = time.monotonic()
        result = processes.run(
            "run_consumers",
            "payments",
            "--once",
            env={"WORKER_LOCK_TIMEOUT": "1", "CONSUMER_RETRY_DELAYS": "60", "LOG_FORMAT": "json"},
            timeout=60,
        )
        took = time.monotonic() - started
        holder.rollback()

    assert result.returncode == 0, result.stderr
    retries = [json.loads(line) for line in result.stderr.splitlines() if line.startswith('{"')]
    retries = [line for line in retries if line["event"].startswith("handler failed, retry 1 of 4")]
    assert [line["message_id"] for line in retries] == [message_id]
    assert "canceling statement due to lock timeout" in retries[0]["event"]
    print(f"run_consumers --once behind the lock: {took:.1f} s")
    assert took < 30  # without lock_timeout it would wait for the holder: forever
    assert Payment.objects.get(order_id=order_id).status == "new"
    assert ledger(order_id) == []
