"""Fixtures: a working directory per test (where the embedded broker keeps its default folder,
var/broker), the worker commands run as real processes against the test database, and, on
RabbitMQ, the test contexts' queues emptied before each test."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest
from django.db import connection
from reliable_messaging import _registry as registry
from reliable_messaging._envelope import IncomingEvent

HERE = Path(__file__).resolve().parent
QUEUES = ("archive_queue", "archive_queue_dead_letters")


def amqp() -> bool:
    return os.environ.get("BROKER_URL", "").startswith("amqp")


def database_url() -> str:
    """The test database, as DATABASE_URL for a process the test starts."""
    given = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{given['NAME']}"
    password = f":{quote(given['PASSWORD'], safe='')}" if given["PASSWORD"] else ""
    host = f"{given['HOST'] or 'localhost'}:{given['PORT'] or 5432}"
    return f"postgres://{quote(given['USER'], safe='')}{password}@{host}/{given['NAME']}"


def amqp_connection():
    """A py-amqp connection to BROKER_URL, as its user: raw messages exactly as given, and queues
    read without being redeclared (kombu would declare them with its own arguments)."""
    import amqp as py_amqp

    parts = urlsplit(os.environ["BROKER_URL"].split(";")[0])
    return py_amqp.Connection(
        host=f"{parts.hostname}:{parts.port or 5672}",
        userid=unquote(parts.username or "guest"),
        password=unquote(parts.password or "guest"),
        virtual_host=unquote(parts.path[1:]) or "/",
    )


def drained(queue: str) -> list[tuple[str, dict, str | bytes]]:
    """Every message waiting in ``queue`` on RabbitMQ: its message id, headers and body."""
    received = []
    with amqp_connection() as connection:
        channel = connection.channel()
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            received.append((message.properties["message_id"], message.headers, message.body))
    return received


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def empty_queues():
    if not amqp():
        return
    from kombu import Connection
    from reliable_messaging._broker import retry_queues

    # A retry waiting in the delay ladder comes back to archive_queue when its time is up: an
    # earlier test's, in the next one, unless emptied too.
    waiting = [queue.name for queue in retry_queues("archive")]
    with Connection(os.environ["BROKER_URL"]) as broker:
        for name in [*QUEUES, *waiting]:
            channel = broker.channel()
            with contextlib.suppress(broker.channel_errors):  # not declared yet: nothing to empty
                channel.queue_purge(name)


@pytest.fixture
def seen(bus: None, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict]]:
    """(consumer, payload) of each call of archive's and retrying's handlers of a note (which still
    run). ``bus``: retrying.bus's, which the test's module imports."""
    received: list[tuple[str, dict]] = []
    for consumer in ("archive", "retrying"):
        spec = registry._handlers[consumer]["notes.note.written"]

        def recording(event: IncomingEvent, spec: registry.HandlerSpec = spec) -> None:
            received.append((spec.consumer, event.payload))
            spec.handler(event)

        handlers = {**registry._handlers[consumer], spec.event_type: replace(spec, handler=recording)}
        monkeypatch.setitem(registry._handlers, consumer, handlers)
    return received


class Manage:
    """``python manage.py ...`` of this folder's project, a process of its own, in the test's
    working directory, on the test database and the test broker."""

    def __init__(self, cwd: Path, settings_module: str = "settings"):
        self.cwd = cwd
        self.settings_module = settings_module

    def env(self) -> dict[str, str]:
        env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG", "BROKER_URL") if key in os.environ}
        # The test's folder first: a settings module a test writes there is found.
        env["PYTHONPATH"] = os.pathsep.join([str(self.cwd), str(HERE)])
        # faulthandler: a process sent SIGABRT writes every thread's stack to its log (Workers.stop)
        return env | {
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": self.settings_module,
            "PYTHONFAULTHANDLER": "1",
        }

    def __call__(self, *args: str, ok: bool = True, timeout: float = 90) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, str(HERE / "manage.py"), *args],
            cwd=self.cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if ok:
            assert done.returncode == 0, f"manage.py {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done


@pytest.fixture
def manage(workdir, transactional_db, empty_queues):
    return Manage(workdir)


class Workers(Manage):
    """``manage.py`` commands left running (a relay, consumers), each logging to a file of the
    test's folder; stopped (SIGTERM) or killed (SIGKILL) by the test, killed at its end if not."""

    def __init__(self, cwd: Path):
        super().__init__(cwd)
        self.running: list[subprocess.Popen] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.cwd / f"worker-{len(self.running)}.log", "w")  # noqa: SIM115  (the process's own)
        argv = [sys.executable, str(HERE / "manage.py"), *args]
        proc = subprocess.Popen(argv, cwd=self.cwd, env=self.env() | (env or {}), stdout=log, stderr=log)
        proc.log = Path(log.name)
        self.running.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 30) -> int:
        """SIGTERM, and the exit code once it has finished what it had in hand."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # killed, and its log shown: what it was doing instead of stopping
            proc.send_signal(signal.SIGABRT)  # faulthandler writes each thread's stack to the log, then it dies
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            tail = "\n".join(proc.log.read_text().splitlines()[-80:])
            raise AssertionError(
                f"{proc.args[2:]} still running {timeout} s after SIGTERM; its log ends:\n{tail}"
            ) from None

    def kill(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def workers(workdir, transactional_db, empty_queues):
    started = Workers(workdir)
    yield started
    for proc in started.running:
        started.kill(proc)


def pytest_collection_modifyitems(items):
    # A test that runs manage.py as a process is marked ``processes``: the matrix's middle cells run the
    # rest (-m "not processes"), its outer cells everything (noxfile.py).
    for item in items:
        if {"workers", "manage", "with_settings"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.processes)


def wait_until(predicate, *, timeout: float, message: str, interval: float = 0.1) -> None:
    """Poll ``predicate`` until it is true; ``TimeoutError`` naming ``message`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


@pytest.fixture
def with_settings(workdir):
    """``manage.py`` under this project's settings with some of MESSAGING changed (as a project
    would write them), for what happens at start-up."""

    def made(*, debug: bool = True, **messaging) -> Manage:
        name = f"changed_settings_{abs(hash(repr(sorted(messaging.items())) + str(debug)))}"
        lines = ["from settings import *  # noqa: F403", f"DEBUG = {debug}", "ALLOWED_HOSTS = ['localhost']"]
        lines += [
            "import datetime  # noqa: F401",
            "from pathlib import PosixPath  # noqa: F401",
            f"MESSAGING = {{**MESSAGING, **{messaging!r}}}",
        ]
        (workdir / f"{name}.py").write_text("\n".join(lines) + "\n")
        return Manage(workdir, name)

    return made
