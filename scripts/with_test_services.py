#!/usr/bin/env python3
"""Run a command against real PostgreSQL and RabbitMQ, each test run isolated.

- Checks that PostgreSQL (127.0.0.1:5432) and RabbitMQ (127.0.0.1:5672) answer; starts a
  stopped one with the machine's own command, and fails with instructions if that does not
  work.
- Gives the run its own RabbitMQ vhost and its own test database name, so two runs (or a run
  and a developer) never interfere, and removes the vhost and any database of that name left
  afterwards (a test database is dropped by pytest-django, unless a run is cut short); a killed
  run's, three hours on.

Usage: scripts/with_test_services.py COMMAND [ARG ...]
"""

import glob
import os
import socket
import subprocess
import sys
import time
import uuid

PG_START = "pg_ctlcluster --skip-systemctl-redirect {version} main start"
RABBIT_START = "rabbitmq-server -detached"
STALE_SECONDS = 3 * 3600


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_for(check, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return False


def ensure_postgres() -> None:
    if port_open(5432):
        return
    versions = [os.path.basename(p) for p in glob.glob("/etc/postgresql/*")]
    print(f"PostgreSQL is not answering on 127.0.0.1:5432; starting it ({PG_START})", file=sys.stderr)
    for version in versions:
        subprocess.run(PG_START.format(version=version), shell=True, check=False)
    if not wait_for(lambda: port_open(5432), 30):
        sys.exit(
            "PostgreSQL is down and could not be started. Start it with:\n"
            "  pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
        )


def rabbit_ready() -> bool:
    return (
        port_open(5672)
        and subprocess.run(["rabbitmqctl", "-q", "list_vhosts"], capture_output=True, check=False).returncode == 0
    )


def ensure_rabbitmq() -> None:
    if rabbit_ready():
        return
    print(f"RabbitMQ is not answering on 127.0.0.1:5672; starting it ({RABBIT_START})", file=sys.stderr)
    subprocess.run(RABBIT_START, shell=True, check=False)
    subprocess.run(["rabbitmqctl", "-q", "await_startup", "--timeout", "60"], check=False)
    if not wait_for(rabbit_ready, 60):
        sys.exit("RabbitMQ is down and could not be started. Start it with:\n  rabbitmq-server -detached")


def rabbitmqctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, check=False)


def is_stale(name: str, prefix: str) -> bool:
    """``<prefix><start time>_...``, started more than three hours ago."""
    started = name.removeprefix(prefix).split("_")[0]
    return name.startswith(prefix) and started.isdigit() and time.time() - int(started) > STALE_SECONDS


def remove_stale_vhosts() -> None:
    for name in rabbitmqctl("list_vhosts", "name").stdout.split():
        if is_stale(name, "saga_test_"):
            rabbitmqctl("delete_vhost", name)


def psql(database_url: str, sql: str) -> list[str]:
    done = subprocess.run(["psql", database_url, "-Atc", sql], capture_output=True, text=True, check=False)
    return done.stdout.split()


def drop_test_databases(database_url: str, run_id: str | None) -> None:
    """This run's test databases (``test_saga_<run id>``, and any named after it), or with no run
    id every stale one."""
    for name in psql(database_url, "SELECT datname FROM pg_database WHERE datname LIKE 'test\\_saga\\_%'"):
        if name.startswith(f"test_saga_{run_id}") if run_id else is_stale(name, "test_saga_"):
            psql(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    ensure_postgres()
    ensure_rabbitmq()
    remove_stale_vhosts()
    database_url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    drop_test_databases(database_url, None)
    run_id = f"{int(time.time())}_{uuid.uuid4().hex[:6]}"
    vhost = f"saga_test_{run_id}"
    if rabbitmqctl("add_vhost", vhost).returncode:
        sys.exit(f"could not create the RabbitMQ vhost {vhost}")
    rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    env = dict(os.environ)
    env.setdefault("DEBUG", "1")
    env["DATABASE_URL"] = database_url
    env["TEST_DATABASE_NAME"] = f"test_saga_{run_id}"
    env["BROKER_URL"] = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    env["TEST_BROKER_VHOST"] = vhost
    try:
        return subprocess.call(sys.argv[1:], env=env)
    finally:
        rabbitmqctl("delete_vhost", vhost)
        drop_test_databases(database_url, run_id)


if __name__ == "__main__":
    sys.exit(main())
