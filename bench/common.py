"""What every benchmark needs: the environment, the database, child processes, progress."""

import io
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from faultlib.processes import listening, wait_until

BASE_DIR = Path(__file__).resolve().parent.parent
PY = sys.executable
BENCH_KEY = "bench.thing.happened"  # routed only to the event-log queue (bound to "#")
# MESSAGING_ENCRYPTION_KEYS of every process a run starts (DEBUG off): one key, known to all, no secret.
BENCH_ENCRYPTION_KEYS = "bench=YmVuY2ggYW5kIHNvYWsgb25seSwgbm8gc2VjcmV0ISE="
# reliable_messaging._ids.new_event_id in SQL (PostgreSQL 15 has no uuidv7()): the rows the bench writes
# get time-ordered event ids, like the rows the application writes.
EVENT_ID_V7 = (
    "encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) placing substring(int8send("
    "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid"
)
PAYLOAD = {"order_id": "00000000-0000-0000-0000-000000000000", "customer_id": "bench", "total": "19.99", "n": 0}
STARTED = time.monotonic()


def progress(message: str) -> None:
    elapsed = time.monotonic() - STARTED
    print(f"[{int(elapsed // 60):02d}:{int(elapsed % 60):02d}] {message}", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the database ---------------------------------------------------------------------------
def database_url(name: str) -> str:
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path=f"/{name}"))


def admin_connect() -> psycopg.Connection:
    return psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)


def create_database(name: str) -> None:
    with admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    with admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Db:
    """An autocommit connection to the bench database, for setting up and reading results."""

    def __init__(self, url: str):
        self.url = url
        self.conn = psycopg.connect(url, autocommit=True)

    def one(self, sql: str, params=None):
        return self.conn.execute(sql, params).fetchone()

    def all(self, sql: str, params=None) -> list:
        return self.conn.execute(sql, params).fetchall()

    def run(self, sql: str, params=None) -> None:
        self.conn.execute(sql, params)

    def pending(self) -> int:
        return self.one("SELECT count(*) FROM messaging_outbox WHERE published_at IS NULL AND parked_at IS NULL")[0]

    def reset_outbox(self) -> None:
        self.run("TRUNCATE messaging_outbox")

    def insert_outbox(self, count: int, *, published: bool = False, event_type: str = BENCH_KEY) -> float:
        """Write ``count`` rows in one transaction; the wall-clock time of its commit."""
        payload = json.dumps(PAYLOAD)
        with self.conn.transaction():
            self.run(
                f"""
                INSERT INTO messaging_outbox (event_id, source, aggregate_type, aggregate_id, event_type,
                    schema_version, correlation_id, causation_id, traceparent, payload, created_at,
                    published_at, attempts, last_error)
                SELECT {EVENT_ID_V7}, 'bench', 'thing', n::text, %s, 1, n::text, '', '',
                    %s::jsonb, clock_timestamp(), CASE WHEN %s THEN now() END, 0, ''
                FROM generate_series(1, %s) AS n
                """,
                [event_type, payload, published, count],
            )
        return time.time()

    def last_published(self) -> float:
        return self.one("SELECT extract(epoch FROM max(published_at))::float8 FROM messaging_outbox")[0]

    def relay_backends(self) -> int:
        return self.one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'outbox_relay'"
        )[0]

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
        wait_until(predicate, timeout=timeout, interval=interval, message=what)

    def close(self) -> None:
        self.conn.close()


# --- child processes ------------------------------------------------------------------------
class Processes:
    """Every process the bench starts; all of them are ended whatever happens."""

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []
        self.started = 0

    def start(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path = BASE_DIR
    ) -> subprocess.Popen:
        self.started += 1
        path = self.log_dir / f"{self.started:03d}-{name}.log"
        with path.open("wb") as log:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env={**self.env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc.log_path = path  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    @staticmethod
    def last_line(proc: subprocess.Popen) -> str:
        lines = proc.log_path.read_text(errors="replace").strip().splitlines()  # type: ignore[attr-defined]
        return lines[-1] if lines else ""

    def manage(
        self, name: str, *args: str, env: dict[str, str] | None = None, cwd: Path = BASE_DIR
    ) -> subprocess.Popen:
        """``manage.py`` of this tree, or of another (``cwd``: a past release's, figure 13)."""
        if args and args[0] == "run_consumers":
            self.ensure_gateway()
        return self.start(name, [PY, "manage.py", *args], env, cwd=cwd)

    def ensure_gateway(self) -> None:
        """The fake gateway's HTTP service that payments' consumers call, started once (on a free
        port unless GATEWAY_PORT is set), at the latency the environment gives it."""
        if getattr(self, "gateway", None) is not None and self.gateway.poll() is None:
            return
        port = self.env.get("GATEWAY_PORT") or str(free_port())
        self.env.update(GATEWAY_PORT=port, GATEWAY_URL=f"http://127.0.0.1:{port}")
        self.gateway = self.start("gateway", [PY, "manage.py", "run_fake_gateway"])
        wait_until(lambda: listening(int(port)), timeout=60, message="the fake gateway")

    def run(self, argv: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> str:
        """Run to completion; its stdout (a failure raises with its output)."""
        result = subprocess.run(
            argv, cwd=BASE_DIR, env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout
        )
        if result.returncode:
            raise RuntimeError(f"{' '.join(argv[:4])} failed ({result.returncode}):\n{result.stderr[-3000:]}")
        return result.stdout

    def stop(self, proc: subprocess.Popen, timeout: float = 20) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):
            self.stop(proc, timeout=10)


@contextmanager
def running(processes: Processes, *procs: subprocess.Popen) -> Iterator[None]:
    try:
        yield
    finally:
        for proc in procs:
            processes.stop(proc)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Bench:
    """One run: the database, the processes, how many rounds, and every number measured."""

    def __init__(self, db: Db, procs: Processes, rounds: int):
        self.db = db
        self.procs = procs
        self.rounds = rounds
        self.figures: dict[str, dict] = {}

    def worker(self, name: str, *args, timeout: float = 300) -> dict:
        out = self.procs.run([PY, "-m", "bench.workers", name, *map(str, args)], timeout=timeout)
        return json.loads(out.strip().splitlines()[-1])

    def start_relays(
        self, count: int, env: dict[str, str] | None = None, cwd: Path = BASE_DIR
    ) -> list[subprocess.Popen]:
        """Start relays and wait until each listens (idle, connected, topology declared)."""
        relays = [self.procs.manage("relay", "run_outbox_relay", env=env, cwd=cwd) for _ in range(count)]
        loops = count * int({**self.procs.env, **(env or {})}.get("RELAY_PIPELINES", "2"))  # each LISTENs
        self.db.wait(lambda: self.db.relay_backends() >= loops, 60, f"{count} relay(s) to listen")
        return relays

    def stop(self, procs: list[subprocess.Popen]) -> None:
        for proc in procs:
            self.procs.stop(proc)

    def drain(
        self,
        rows: int,
        relays: int,
        timeout: float = 180,
        reset: bool = True,
        env: dict[str, str] | None = None,
        cwd: Path = BASE_DIR,
    ) -> float:
        """Write ``rows`` in one transaction for idle relays; rows/s from that commit to the last mark."""
        if reset:
            self.db.reset_outbox()
        procs = self.start_relays(relays, env, cwd)
        try:
            committed = self.db.insert_outbox(rows)
            self.db.wait(lambda: self.db.pending() == 0, timeout, f"{rows} rows relayed", interval=0.2)
            return rows / (self.db.last_published() - committed)
        finally:
            self.stop(procs)


def release_tree(root: Path, commit: str) -> Path:
    """A past release's tree, from git (as ``make upgrade-test`` takes one), run with this venv."""
    tree = root / f"release-{commit}"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", commit], cwd=BASE_DIR, capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree
