"""The PostgreSQL limits this project gives every long-running loop's and the web server's
connections (config: its WORKER_* and WEB_* variables). What the limits do to a consumer stuck behind
someone else's lock is the bus's own test: packages/django-reliable-messaging/tests/test_session_limits.py."""

import pytest

from faultlib.fixtures import ALL_DATABASES

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
