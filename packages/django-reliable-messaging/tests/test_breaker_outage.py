"""A handler's dependency down for minutes under steady load: no dead letter, the breaker opened
and closed, every message handled once afterwards, and the dependency called about once per
cool-down while it was down, not once per message per attempt.

The real workers, processes of their own: ``run_outbox_relay``, and ``run_consumers outage`` with
its metrics served (what an operator reads). The outage context (outage/context.toml: its breaker
and retries) calls a dependency over HTTP: a server of this test on 127.0.0.1. Notes are written
through the outbox at RATE a second: WARM_UP seconds with the dependency up, then the outage
(``BREAKER_OUTAGE_SECONDS``, default 120: its first half answering 503, its second refusing
connections), then RECOVERY seconds up again. Marked ``outage``: minutes long, run once
(``-m outage``), not in every cell of a matrix (``-m "not outage"``).

And the same at the lightest load, in seconds: one message alone, every trial of the outage."""

import http.server
import itertools
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
from notes.models import Note
from notes.services import write_note
from reliable_messaging.models import DeadLetter, InboxMessage, OutboxMessage
from retrying.bus import bus, consume, relay  # noqa: F401 - bus: the fixture
from retrying.handlers import CALLS, FAILING_CALLS

from conftest import HERE

HANDLER = "outage.handlers.on_note_written"
BREAKER = tomllib.loads((HERE / "outage" / "context.toml").read_text())["handlers"][HANDLER]["breaker"]
FAILURES, COOL_DOWN = BREAKER["failures"], BREAKER["cool_down"]


def outage_seconds() -> float:
    """``BREAKER_OUTAGE_SECONDS``: at least two cool-downs, for a failed trial to be seen."""
    given = os.environ.get("BREAKER_OUTAGE_SECONDS", "120")
    try:
        seconds = float(given)
    except ValueError:
        seconds = math.nan
    if not 2 * COOL_DOWN <= seconds <= 3600:
        raise ValueError(f"BREAKER_OUTAGE_SECONDS={given!r}: the outage's length, seconds from {2 * COOL_DOWN} to 3600")
    return seconds


OUTAGE = outage_seconds()
RATE, WARM_UP, RECOVERY = 5, 10, 10  # notes a second; seconds of load before and after the outage
NOTES = int(RATE * (WARM_UP + OUTAGE + RECOVERY))
# After the last note: the trial that closes the breaker, the messages still waiting out a
# cool-down, and the backlog they make.
DRAIN = 2 * COOL_DOWN + 60
# How long after its cool-down a trial may start: when the next message arrives.
TRIAL_LATE = 1.0


class Dependency:
    """An HTTP server on 127.0.0.1: answers 200, or 503 while ``failing``; ``down()`` closes it and
    holds its port with a socket that does not listen (a connection is refused) until ``up()``."""

    def __init__(self) -> None:
        self.failing = False
        self._held: socket.socket | None = None
        self._server = self._serve(0)
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def _serve(self, port: int) -> http.server.ThreadingHTTPServer:
        dependency = self

        class Answer(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(503 if dependency.failing else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Answer)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return server

    def down(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._held = socket.socket()
        self._held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._held.bind(("127.0.0.1", self.port))

    def up(self) -> None:
        self.failing = False
        if self._held is not None:
            self._held.close()
            self._held = None
            self._server = self._serve(self.port)

    def close(self) -> None:
        self.up()
        self._server.shutdown()
        self._server.server_close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> str | None:
    """The consumer's metrics page, or None when it does not answer in time (a busy process)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return answer.read().decode()
    except OSError:
        return None


def sample(page: str, name: str, labels: str) -> float | None:
    found = re.search(rf"^{name}\{{{re.escape(labels)}\}} (\S+)$", page, re.MULTILINE)
    return float(found.group(1)) if found else None


BREAKER_OPEN = ("messaging_breaker_open", f'consumer="outage",handler="{HANDLER}"')
BREAKER_WAITS = ("messaging_consumer_waits_total", 'consumer="outage",reason="breaker"')


class WorkerProcesses:
    """The relay and the outage consumer as processes, their stderr in files; SIGTERM at the end."""

    def __init__(self, command, workdir: Path, dependency: Dependency) -> None:
        self.workdir = workdir
        self.calls = workdir / "calls.txt"
        self.metrics_port = free_port()
        self.env = command.env() | {"OUTAGE_DEPENDENCY_URL": dependency.url, "OUTAGE_CALLS_FILE": str(self.calls)}
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, name: str, *args: str, ready: str) -> None:
        with (self.workdir / f"{name}.log").open("w") as log:  # the process keeps its own copy
            self.processes[name] = subprocess.Popen(
                [sys.executable, str(HERE / "manage.py"), *args],
                cwd=self.workdir,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + 60
        while ready not in self.log(name):
            assert self.processes[name].poll() is None, f"{name} stopped:\n{self.log(name)}"
            assert time.monotonic() < deadline, f"{name} not ready in 60s:\n{self.log(name)}"
            time.sleep(0.2)

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text()

    def stop(self) -> dict[str, int | None]:
        """SIGTERM to each still running, and its exit code; None for one that had stopped before."""
        codes: dict[str, int | None] = {}
        for name, process in self.processes.items():
            if process.poll() is not None:
                codes[name] = None
                continue
            process.send_signal(signal.SIGTERM)
            try:
                codes[name] = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                codes[name] = process.wait(timeout=10)
        return codes


@pytest.fixture
def dependency():
    server = Dependency()
    yield server
    server.close()


@pytest.fixture
def outage_workers(manage, with_settings, workdir, dependency):
    pytest.importorskip("prometheus_client", reason="the breaker's gauge is read from the metrics extra's page")
    started = WorkerProcesses(with_settings(DECLARED_CONTEXTS=["notes", "outage"]), workdir, dependency)
    yield started
    started.stop()


@pytest.mark.outage
@pytest.mark.timeout(WARM_UP + OUTAGE + RECOVERY + DRAIN + 120)
def test_a_dependency_down_for_minutes_under_load_leaves_no_dead_letter(outage_workers, dependency):
    outage_workers.start(
        "consumer", "run_consumers", "outage", "--metrics-port", str(outage_workers.metrics_port), ready="consuming"
    )
    outage_workers.start("relay", "run_outbox_relay", ready="relay started")

    # Notes at RATE a second; the dependency failing, then down, then up, on time; the breaker's gauge each second.
    started = time.time()
    down_at, refused_at, up_at = started + WARM_UP, started + WARM_UP + OUTAGE / 2, started + WARM_UP + OUTAGE
    changes = [(down_at, lambda: setattr(dependency, "failing", True)), (refused_at, dependency.down),
               (up_at, dependency.up)]  # fmt: skip
    gauge: list[tuple[float, float | None]] = []  # (read by then, messaging_breaker_open), None: not served yet
    written, next_scrape = 0, started

    def next_note() -> float:
        return started + written / RATE if written < NOTES else math.inf

    deadline = up_at + RECOVERY + DRAIN
    while time.time() < deadline:
        now = time.time()
        while changes and changes[0][0] <= now:
            changes.pop(0)[1]()
        if now >= next_note():
            write_note(f"note {written}")
            written += 1
        if now >= next_scrape:
            if (page := scrape(outage_workers.metrics_port)) is not None:
                gauge.append((time.time(), sample(page, *BREAKER_OPEN)))
            next_scrape += 1
            if written == NOTES and InboxMessage.objects.filter(consumer="outage").count() == NOTES:
                break
        time.sleep(max(0.0, min(next_note(), next_scrape) - time.time()))
    page = scrape(outage_workers.metrics_port) or ""
    running = {name: process.poll() is None for name, process in outage_workers.processes.items()}
    codes = outage_workers.stop()
    consumer_log = outage_workers.log("consumer")

    assert running == {"consumer": True, "relay": True}, consumer_log[-3000:]
    assert codes == {"consumer": 0, "relay": 0}
    # No dead letter; every note handled, once.
    assert DeadLetter.objects.count() == 0
    published = set(OutboxMessage.objects.filter(event_type="notes.note.written").values_list("event_id", flat=True))
    assert len(published) == NOTES
    handled = list(InboxMessage.objects.filter(consumer="outage").values_list("message_id", flat=True))
    assert sorted(handled) == sorted(str(event_id) for event_id in published)
    calls = [line.split() for line in outage_workers.calls.read_text().splitlines()]
    answered = sorted(note_id for _, note_id, status in calls if status == "200")
    assert answered == sorted(str(note_id) for note_id in Note.objects.values_list("id", flat=True))

    # The dependency while it was down: FAILURES calls open the breaker, then one trial per
    # cool-down, each at least a cool-down after the one before; never one per message.
    failed = [(float(at), status) for at, _, status in calls if status != "200"]
    times = [at for at, _ in failed]
    assert all(down_at - 1 < at < up_at + 1 for at in times), (down_at, up_at, times)
    assert "503" in {status for _, status in failed}  # down both ways
    if OUTAGE / 2 >= 2 * COOL_DOWN:  # the refusing half is long enough for a trial
        assert "ConnectionRefusedError" in {status for _, status in failed}
    trials = times[FAILURES:]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times[FAILURES - 1 :])]
    assert all(gap >= COOL_DOWN - 0.05 for gap in gaps), times
    assert math.floor((OUTAGE - 2) / (COOL_DOWN + TRIAL_LATE)) <= len(trials) <= math.ceil(OUTAGE / COOL_DOWN), times

    # What an operator sees: the gauge 1 through the outage, 0 before and after; the log says so.
    open_during = [value for at, value in gauge if down_at + 5 <= at < up_at]
    assert len(open_during) >= (OUTAGE - 5) / 2 and set(open_during) == {1.0}, gauge
    assert {value for at, value in gauge if at < down_at} <= {0.0, None}, gauge
    assert sample(page, *BREAKER_OPEN) == 0.0
    assert (sample(page, *BREAKER_WAITS) or 0) > 0
    assert consumer_log.count("breaker open:") == len(trials) + 1
    assert consumer_log.count("breaker closed:") == 1


@pytest.mark.usefixtures("bus")
def test_a_lone_message_waits_out_an_outage_longer_than_its_attempts():
    """The breaking context (failures = 2, cool_down = 1 s, the settings' 4 attempts): the only
    message is the trial of every cool-down. The failure that opens the breaker, and each failed
    trial, leave its attempt as it was: it waits with the others, if any, for the next trial."""
    FAILING_CALLS["breaking"] = 6  # two open the breaker, four trials fail: more failures than its attempts
    write_note("alone")
    relay()
    consume("breaking")

    assert DeadLetter.objects.count() == 0
    assert InboxMessage.objects.filter(consumer="breaking").count() == 1
    assert [attempt for _, _, attempt, _ in CALLS] == [1, 2, 2, 2, 2, 2, 2]
