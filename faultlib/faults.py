"""Fault injection for the fault tests and ``make chaos``: SIGKILLs, cut connections, restarts.

Everything here touches only the test's own resources: its processes, the connections of its
RabbitMQ vhost (``TEST_BROKER_VHOST``) and the backends of its PostgreSQL test database. One
exception reaches the whole broker: ``broker_restart`` stops it and is for ``make chaos`` only
(``memory_alarm`` is raised on a node of the test's own).
"""

import os
import random
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from django.db import connections
from reliable_messaging.operator import RELAY_APPLICATION_NAME

from faultlib.processes import ProcessGroup, wait_until


@dataclass
class Injection:
    """What one fault did, for the test's assertions and the chaos run's printout."""

    at: float  # seconds since the injector started
    description: str
    ok: bool = True  # False when the fault did not happen as planned (a fault point not reached)


class Restartable:
    """A long-running command that the faults SIGKILL and start again, always the same way."""

    def __init__(self, group: ProcessGroup, name: str, *args: str, env: dict[str, str] | None = None):
        self.group, self.name, self.args, self.env = group, name, args, dict(env or {})
        self.proc = group.start(name, *args, env=self.env)
        self.kills = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.group.kill(self.proc)
        self.kills += 1

    def start(self) -> None:
        self.proc = self.group.start(self.name, *self.args, env=self.env)

    def kill_and_restart(self) -> str:
        self.kill()
        self.start()
        return f"SIGKILL {self.name} at a random moment, restarted"

    def kill_at(self, point: str, marker_dir: Path, timeout: float = 30) -> tuple[bool, str]:
        """Restart it with a fault point, SIGKILL it there, start it again without."""
        marker = marker_dir / f"{self.name}-{uuid.uuid4().hex[:8]}.pid"
        self.group.kill(self.proc)
        self.proc = self.group.start(
            self.name, *self.args, env={**self.env, "FAULT_POINT": point, "FAULT_MARKER": str(marker)}
        )
        deadline = time.monotonic() + timeout
        while not marker.exists() and time.monotonic() < deadline and self.alive():
            time.sleep(0.05)
        reached = marker.exists()
        self.kill()
        self.start()
        return reached, f"SIGKILL {self.name} at {point}{'' if reached else ' (NOT REACHED)'}, restarted"


class Injector(threading.Thread):
    """Runs faults one after another at random intervals, in the background.

    The faults touch no database connection of this process, so the test's thread may go on
    placing orders meanwhile.
    """

    def __init__(self, rng: random.Random, faults: list[Callable[[], str | tuple[bool, str]]], interval=(0.3, 1.5)):
        super().__init__(daemon=True)
        self.rng, self.faults, self.interval = rng, list(faults), interval
        self.log: list[Injection] = []
        self.error: BaseException | None = None
        self._stop_asked = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        try:
            for fault in self.faults:
                if self._stop_asked.wait(self.rng.uniform(*self.interval)):
                    return
                outcome = fault()
                ok, description = outcome if isinstance(outcome, tuple) else (True, outcome)
                self.log.append(Injection(round(time.monotonic() - started, 2), description, ok))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread by finish()
            self.error = exc

    def finish(self, timeout: float = 300) -> list[Injection]:
        self.join(timeout)
        if self.is_alive():
            self._stop_asked.set()
            raise AssertionError(f"the injector did not finish in {timeout}s")
        if self.error:
            raise self.error
        return self.log


def kill_any(rng: random.Random, targets: list[Restartable]) -> Callable[[], str]:
    return lambda: rng.choice(targets).kill_and_restart()


def kill_at(rng: random.Random, targets: list[Restartable], point: str, marker_dir: Path):
    return lambda: rng.choice(targets).kill_at(point, marker_dir)


# --- connections --------------------------------------------------------------------------


# A cut right after the previous one can find the processes still reconnecting (they back off
# first); it waits this long for them, so that every cut reaches live connections.
RECONNECT_WAIT = 15.0


def _wait_for_connections(count: Callable[[], int], timeout: float = RECONNECT_WAIT) -> int:
    deadline = time.monotonic() + timeout
    while (found := count()) == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def rabbitmqctl(*args: str, check: bool = True) -> str:
    """Run ``rabbitmqctl -q``; its output, or RuntimeError when it fails and ``check`` is set."""
    result = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=120, check=False)
    if check and result.returncode:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: {result.stderr or result.stdout}")
    return result.stdout.strip()


def close_broker_connections() -> str:
    """Cut every AMQP connection of the test's vhost (and of no other)."""
    vhost = os.environ["TEST_BROKER_VHOST"]
    before = _wait_for_connections(lambda: _broker_connection_count(vhost))
    rabbitmqctl("close_all_connections", "--vhost", vhost, "fault test: connection cut")
    return f"closed the {before} broker connections of vhost {vhost}"


def _broker_connection_count(vhost: str) -> int:
    output = rabbitmqctl("list_connections", "vhost", "--no-table-headers", check=False)
    return sum(1 for line in output.splitlines() if line.strip() == vhost)


ALARM_WATERMARK = "0.000001"


def _memory_alarm_raised(node: str) -> bool:
    return rabbitmqctl("-n", node, "eval", "rabbit_alarm:get_alarms().") != "[]"


@contextmanager
def memory_alarm(node: str) -> Iterator[None]:
    """A real memory alarm on ``node``: it blocks every publisher of every vhost of the node until
    it clears. A node of the test's own (``faultlib.cluster.own_cluster(nodes=1)``): on the
    machine's, it would block every other test run and ``make run`` too.

    The watermark goes back to the value it had, whatever happens.
    """
    # A relative watermark; an absolute one ({absolute, N}) fails here, before any change.
    original = float(rabbitmqctl("-n", node, "eval", "vm_memory_monitor:get_vm_memory_high_watermark()."))
    try:
        rabbitmqctl("-n", node, "set_vm_memory_high_watermark", ALARM_WATERMARK)
        wait_until(lambda: _memory_alarm_raised(node), timeout=30, message="the memory alarm raised")
        yield
    finally:
        rabbitmqctl("-n", node, "set_vm_memory_high_watermark", str(original))
        wait_until(lambda: not _memory_alarm_raised(node), timeout=60, message="the memory alarm cleared")


# The processes a fault test starts connect under this name, so that cutting "the test's
# database connections" can never reach the test's own connection or another run's.
APPLICATION_NAME = "saga_fault_test"


# A relay renames its session once connected (reliable_messaging.operator.RELAY_APPLICATION_NAME): its backends
# are the test's processes' too (only the test's database is ever searched).
PROCESS_NAMES = [APPLICATION_NAME, RELAY_APPLICATION_NAME]


def with_application_name(database_url: str) -> str:
    return f"{database_url}{'&' if '?' in database_url else '?'}application_name={APPLICATION_NAME}"


def terminate_database_backends() -> str:
    """pg_terminate_backend the backends of the test database opened by the test's processes."""
    connection = connections["default"]
    try:
        with connection.cursor() as cursor:
            _wait_for_connections(lambda: _count_process_backends(cursor))
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = ANY(%s) AND pid <> pg_backend_pid()",
                [PROCESS_NAMES],
            )
            [terminated] = cursor.fetchone()
            cursor.execute("SELECT current_database()")
            [database] = cursor.fetchone()
    finally:
        if threading.current_thread() is not threading.main_thread():
            connection.close()  # the injector's thread has its own connection: do not leak it
    return f"terminated {terminated} PostgreSQL backends of {database}"


def _count_process_backends(cursor) -> int:
    cursor.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = ANY(%s)",
        [PROCESS_NAMES],
    )
    return cursor.fetchone()[0]


def backends_waiting_on_a_lock() -> int:
    """Backends of the test's processes waiting on a lock held by another transaction."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s AND wait_event_type = 'Lock'",
            [APPLICATION_NAME],
        )
        return cursor.fetchone()[0]


def pause(target: Restartable, seconds: float) -> Callable[[], str]:
    """SIGKILL a process and start it again only after a while: a consumer that is down."""

    def fault() -> str:
        target.kill()
        time.sleep(seconds)  # time is the subject: how long the consumer stays down
        target.start()
        return f"{target.name} SIGKILLed, down for {seconds:.1f}s, restarted"

    return fault


def broker_restart(down_for: float = 3.0) -> str:
    """stop_app / start_app: every vhost of the broker goes away. ``make chaos`` only."""
    try:
        rabbitmqctl("stop_app")
        time.sleep(down_for)  # time is the subject: how long the broker stays down
    finally:
        rabbitmqctl("start_app", check=False)
        rabbitmqctl("await_startup", check=False)
    return f"broker stopped (stop_app) for {down_for:.1f}s and started again"
