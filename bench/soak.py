#!/usr/bin/env python3
"""`make soak`: sustained load against the real stack; fails on any 5xx, unbounded connections or memory growth.

For each web mode (``make serve``'s nginx in front of gunicorn, as in production, and ``make run``'s
development server), on a fresh database: the processes of the Procfile (web, one relay, two
``run_consumers``, the deadline loop, the fake gateway and the gateway worker), then ``--clients``
concurrent clients for ``--seconds`` of checkouts, reads of their orders and cancellations, all to
127.0.0.1. Meanwhile it samples every process's PostgreSQL connections (each backend's client port,
traced to the process that owns the socket) and its RSS. At the end it waits for the saga backlog to
drain (bounded) and prints: requests, status counts, p50/p99, peak connections per process against
its bound, peak RSS per process, the backlog and the time to drain it.

It fails (exit 1) on any 5xx or broken connection, on a process above its connection bound (or
the whole stack above ``--max-connections``), on RSS growing more than 20 % between the end of
the warm-up and the end of the load, on a backlog that does not drain, or on a process that
does not exit 0 when stopped.

Runs under scripts/with_test_services.py (``make soak``), which gives it a RabbitMQ vhost and a
database name; it creates and drops its own database per mode.

Usage: bench/soak.py [--clients 64] [--seconds 300] [--modes gunicorn,runserver] [--gateway-latency MS] [--json PATH]

Issue 27's soak (memory flat with the gateway at 250 ms for 10 minutes):
``make soak SOAK_ARGS="--modes gunicorn --seconds 600 --gateway-latency 250"``.
"""

import argparse
import asyncio
import json
import os
import random
import secrets
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    BENCH_ENCRYPTION_KEYS,
    PY,
    Db,
    Processes,
    create_database,
    database_url,
    drop_database,
    free_port,
    percentile,
    progress,
)
from faultlib.processes import descendants  # noqa: E402

MODES = {
    "gunicorn": "make serve: nginx + gunicorn (2 workers, DEBUG off), as in production",
    "runserver": "make run's runserver",
}
CATALOG = [("WIDGET", "Widget", "19.99", 10_000_000), ("RARE", "Rare print", "250.00", 50)]
POOL_MAX = int(os.environ.get("DATABASE_POOL_MAX_SIZE", "4"))
RELAY_PIPELINES = int(os.environ.get("RELAY_PIPELINES", "2"))
GATEWAY_STORAGE_THREADS = 4  # fake_gateway/server.py, STORAGE_THREADS: a database connection each
GUNICORN_WORKERS = 2
RSS_GROWTH_LIMIT = 0.20
DRAIN_TIMEOUT = 300.0
SAMPLE_EVERY = 0.5


# --- HTTP load --------------------------------------------------------------------------------
@dataclass
class Load:
    port: int
    seconds: float
    clients: int
    seed: int
    statuses: Counter = field(default_factory=Counter)  # (action, status) -> count
    latencies: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)  # connection-level failures by type

    async def request(self, method: str, path: str, body=None, key: str | None = None) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else b""
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            + (f"Idempotency-Key: {key}\r\n" if key else "")
            + "\r\n"
        )
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 10)
        try:
            writer.write(head.encode() + data)
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(), 30)
        finally:
            writer.close()
        status_line, _, rest = raw.partition(b"\r\n")
        _, _, body_bytes = rest.partition(b"\r\n\r\n")
        return int(status_line.split()[1]), body_bytes

    async def client(self, n: int, end: float) -> None:
        rng = random.Random(self.seed * 1000 + n)
        mine: list[str] = []
        while time.monotonic() < end:
            roll = rng.random()
            if roll < 0.7 or not mine:
                action = "checkout"
                items = [{"sku": "WIDGET", "quantity": rng.randint(1, 3)}]
                if rng.random() < 0.1:
                    items.append({"sku": "RARE", "quantity": 1})
                token = rng.choice(["tok_visa"] * 17 + ["tok_chargeDeclined", "tok_unknown"])
                call = ("POST", "/api/checkout/", {"customer_id": f"soak-{n}", "items": items, "payment_token": token})
                key = str(uuid.uuid4())
            elif roll < 0.9:
                action, call, key = "read", ("GET", f"/api/orders/{rng.choice(mine)}/", None), None
            else:
                action, call, key = "cancel", ("POST", f"/api/orders/{rng.choice(mine)}/cancel/", None), None
            started = time.monotonic()
            try:
                status, body = await self.request(*call, key=key)
            except (TimeoutError, OSError, ValueError, IndexError) as exc:
                self.errors[type(exc).__name__] += 1
                self.statuses[(action, 0)] += 1
                continue
            self.latencies.append(time.monotonic() - started)
            self.statuses[(action, status)] += 1
            if action == "checkout" and status == 201:
                mine.append(json.loads(body)["id"])
                mine = mine[-20:]

    async def run(self) -> None:
        end = time.monotonic() + self.seconds
        await asyncio.gather(*(self.client(n, end) for n in range(self.clients)))


# --- what each process holds --------------------------------------------------------------------
def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def local_port_inodes(server_port: int) -> dict[int, str]:
    """Local TCP port -> socket inode, for every TCP socket of the machine to ``server_port``.

    Only sockets to that port: the load's own HTTP connections leave thousands of TIME_WAIT
    sockets (inode 0) whose local ports a database connection may share.
    """
    ports = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == server_port:
                ports[int(fields[1].rsplit(":", 1)[1], 16)] = fields[9]
    return ports


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Sampler(threading.Thread):
    """Every half second: each process's connections to the soak database and its RSS."""

    def __init__(self, db_url: str, roles: dict[str, int], warmup_until: float):
        super().__init__(daemon=True)
        self.db = Db(db_url)
        self.server_port = urlsplit(db_url).port or 5432
        self.roles = roles  # role -> root pid (make serve's nginx and gunicorn count as "web workers")
        self.warmup_until = warmup_until
        self.peak_connections: dict[str, int] = defaultdict(int)
        self.peak_total = 0
        self.peak_rss: dict[str, float] = defaultdict(float)
        self.rss_at_warmup: dict[str, float] = {}
        self.rss_last: dict[str, float] = {}
        self.stop_asked = threading.Event()

    def pids(self) -> dict[str, list[int]]:
        found = {}
        for role, pid in self.roles.items():
            found[role] = [pid]
            below = descendants(pid)
            if below and role == "web":  # make serve's nginx and gunicorn, masters and workers
                found["web workers"] = below
        return found

    def sample(self) -> None:
        ports = [
            row[0]
            for row in self.db.all(
                "SELECT client_port FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND client_port IS NOT NULL"
            )
        ]
        inodes = local_port_inodes(self.server_port)
        pids = self.pids()
        owners = {inode: role for role, members in pids.items() for pid in members for inode in socket_inodes(pid)}
        mine = socket_inodes(os.getpid())  # this script's own connections (it reads the backlog)
        ports = [port for port in ports if inodes.get(port) not in mine]
        counts: Counter = Counter(owners.get(inodes.get(port), "other") for port in ports)
        if counts.get("other"):
            # A backend outlives its client's socket by a moment: a port whose socket is gone by now
            # (or in TIME_WAIT, inode 0) is a connection being closed, not one an unknown process holds.
            unowned = [port for port in ports if owners.get(inodes.get(port)) is None]
            now_inodes = local_port_inodes(self.server_port)
            closing = sum(inodes.get(port, "0") == "0" or now_inodes.get(port, "0") != inodes[port] for port in unowned)
            counts["closing"] = closing
            counts["other"] -= closing
        for role in pids:
            self.peak_connections[role] = max(self.peak_connections[role], counts.get(role, 0))
        for role in ("other", "closing"):
            if counts.get(role):
                self.peak_connections[role] = max(self.peak_connections[role], counts[role])
        self.peak_total = max(self.peak_total, len(ports))
        now = time.monotonic()
        for role, members in pids.items():
            rss = max(rss_mb(pid) for pid in members)
            self.peak_rss[role] = max(self.peak_rss[role], rss)
            self.rss_last[role] = rss
            if now <= self.warmup_until or role not in self.rss_at_warmup:
                self.rss_at_warmup[role] = rss

    def run(self) -> None:
        while not self.stop_asked.wait(SAMPLE_EVERY):
            try:
                self.sample()
            except Exception as exc:  # noqa: BLE001 - a sample lost is no reason to stop sampling
                progress(f"sample failed: {type(exc).__name__}: {exc}")

    def finish(self) -> None:
        self.stop_asked.set()
        self.join(10)
        self.db.close()


# --- one mode -------------------------------------------------------------------------------------
def connection_bounds(mode: str) -> dict[str, int]:
    """What each process may hold: a web process its pool, each loop its dedicated connections."""
    # The relay: one per pipeline; the consumers: default; the gateway worker: its loop's and its
    # listener's (its call threads touch no database); the fake gateway (the Procfile's
    # ``gateway``): one per storage thread.
    bounds = {
        "relay": RELAY_PIPELINES,
        "consumers": 1,
        "orders-consumers": 1,
        "deadline": 1,
        "gateway": GATEWAY_STORAGE_THREADS,
        "gateway-calls": 2,
    }
    if mode == "gunicorn":
        bounds.update({"web": 0, "web workers": GUNICORN_WORKERS * POOL_MAX})
    else:
        bounds["web"] = POOL_MAX
    return bounds


def soak_mode(mode: str, args, base_env: dict[str, str], run_dir: Path) -> dict:
    name = f"{os.environ.get('TEST_DATABASE_NAME') or 'soak'}_{mode}"[:60]
    db_url = database_url(name)
    env = {
        **base_env,
        "DATABASE_URL": db_url,
        "GATEWAY_DATABASE_URL": db_url,
        "DEBUG": "1" if mode == "runserver" else "0",
        "FAKE_GATEWAY": "1",  # the fake card gateway, a development service, with DEBUG off too
        "SECRET_KEY": secrets.token_urlsafe(40),
        "MESSAGING_ENCRYPTION_KEYS": BENCH_ENCRYPTION_KEYS,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "FAKE_GATEWAY_LATENCY": str(args.gateway_latency),
    }
    procs = Processes(env, run_dir)
    create_database(name)
    result: dict = {
        "mode": mode,
        "what": MODES[mode],
        "clients": args.clients,
        "seconds": args.seconds,
        "gateway_latency_ms": args.gateway_latency,
    }
    try:
        procs.run([PY, "manage.py", "migrate", "--noinput", "-v0"])
        catalog = ", ".join(f"({sku!r}, {name!r}, Decimal({price!r}), {stock})" for sku, name, price, stock in CATALOG)
        procs.run(
            [
                PY,
                "manage.py",
                "shell",
                "-c",
                (
                    "from decimal import Decimal\nfrom inventory.services import product_upsert\n"
                    f"for sku, name, price, stock in [{catalog}]:\n"
                    "    product_upsert(sku=sku, name=name, price=price, stock=stock)"
                ),
            ]
        )
        port = free_port()
        if mode == "gunicorn":  # exactly what make serve runs: scripts/serve.py
            argv = [PY, "scripts/serve.py", "--host", "127.0.0.1", "--port", str(port)]
        else:
            argv = [PY, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
        running = {
            "web": procs.start("web", argv, env={"WEB_CONCURRENCY": str(GUNICORN_WORKERS)}),
            "relay": procs.manage("relay", "run_outbox_relay"),
            "consumers": procs.manage("consumers", "run_consumers", "--except", "orders,events"),
            "orders-consumers": procs.manage("orders-consumers", "run_consumers", "orders", "events"),
            "deadline": procs.manage("deadline", "expire_pending_orders", "--loop"),
            "gateway-calls": procs.manage("gateway-calls", "run_gateway_calls"),
        }
        running["gateway"] = procs.gateway  # started with the first consumer (bench.common.Processes)
        db = Db(db_url)
        db.wait(
            lambda: db.one("SELECT count(*) FROM orders_storefront_product")[0] == len(CATALOG),
            60,
            "the storefront copy of the catalogue",
            interval=0.2,
        )
        wait_http(port)

        warmup = max(5.0, args.seconds * 0.2)
        sampler = Sampler(db_url, {role: p.pid for role, p in running.items()}, time.monotonic() + warmup)
        sampler.start()
        progress(f"{mode}: {args.clients} clients for {args.seconds:.0f}s (warm-up {warmup:.0f}s)")
        load = Load(port, args.seconds, args.clients, args.seed)
        asyncio.run(load.run())
        progress(f"{mode}: load done, draining the backlog")

        backlog = backlog_of(db)
        drained_at = None
        started = time.monotonic()
        while time.monotonic() - started < DRAIN_TIMEOUT:
            if sum(backlog_of(db).values()) == 0:
                drained_at = time.monotonic() - started
                break
            time.sleep(0.5)
        sampler.finish()
        exits = {role: stop_code(procs, proc) for role, proc in running.items()}
        db.close()

        requests = sum(load.statuses.values())
        result.update(
            {
                "requests": requests,
                "per_second": requests / args.seconds,
                "statuses": {f"{a} {s}": n for (a, s), n in sorted(load.statuses.items())},
                "errors": dict(load.errors),
                "p50_ms": percentile(load.latencies, 0.5) * 1000,
                "p99_ms": percentile(load.latencies, 0.99) * 1000,
                "connections": dict(sampler.peak_connections),
                "connection_bounds": connection_bounds(mode),
                "connections_total": sampler.peak_total,
                "rss_peak_mb": dict(sampler.peak_rss),
                "rss_growth": {
                    role: sampler.rss_last[role] / sampler.rss_at_warmup[role] - 1
                    for role in sampler.rss_last
                    if sampler.rss_at_warmup.get(role)
                },
                "backlog_at_end": backlog,
                "drain_seconds": drained_at,
                "exit_codes": exits,
            }
        )
        result["failures"] = failures(result, args.max_connections)
        return result
    finally:
        procs.stop_all()
        drop_database(name)


def wait_http(port: int) -> None:
    import urllib.request

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/products/", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError("the web process did not answer in 60 s")


def backlog_of(db: Db) -> dict[str, int]:
    return {
        "pending_orders": db.one("SELECT count(*) FROM orders_order WHERE status = 'PENDING'")[0],
        "outbox_pending": db.pending(),
    }


def stop_code(procs: Processes, proc) -> int | None:
    procs.stop(proc)
    return proc.returncode


def failures(result: dict, max_connections: int) -> list[str]:
    found = []
    for key, n in result["statuses"].items():
        status = int(key.rsplit(" ", 1)[1])
        if status == 0 or status >= 500:
            found.append(f"{n} x {key}")
    for role, bound in result["connection_bounds"].items():
        if result["connections"].get(role, 0) > bound:
            found.append(f"{role} held {result['connections'][role]} database connections, bound {bound}")
    if result["connections"].get("other"):
        found.append(f"{result['connections']['other']} database connections of unknown processes")
    if result["connections_total"] > max_connections:
        found.append(f"the stack held {result['connections_total']} connections, more than {max_connections}")
    for role, growth in result["rss_growth"].items():
        if growth > RSS_GROWTH_LIMIT:
            found.append(f"{role} RSS grew {growth:.0%} after the warm-up (limit {RSS_GROWTH_LIMIT:.0%})")
    if result["drain_seconds"] is None:
        found.append(f"the backlog did not drain in {DRAIN_TIMEOUT:.0f}s")
    found += [f"{role} exited {code} when stopped" for role, code in result["exit_codes"].items() if code != 0]
    return found


def report(result: dict) -> str:
    lines = [
        f"== {result['what']}: {result['clients']} clients, {result['seconds']:.0f} s",
        f"requests {result['requests']:,} ({result['per_second']:,.0f}/s), p50 {result['p50_ms']:.0f} ms, "
        f"p99 {result['p99_ms']:.0f} ms",
        "statuses: " + ", ".join(f"{k} x{n}" for k, n in result["statuses"].items()),
        "peak database connections: "
        + ", ".join(
            f"{role} {result['connections'].get(role, 0)}/{bound}"
            for role, bound in result["connection_bounds"].items()
        )
        + f"; whole stack {result['connections_total']}"
        + (f" (at most {n} of them closing)" if (n := result["connections"].get("closing")) else ""),
        "peak RSS: "
        + ", ".join(
            f"{role} {mb:.0f} MB ({result['rss_growth'].get(role, 0):+.0%} after warm-up)"
            for role, mb in result["rss_peak_mb"].items()
        ),
        f"backlog at the end: {result['backlog_at_end']}; drained in "
        + (f"{result['drain_seconds']:.1f} s" if result["drain_seconds"] is not None else "NOT DRAINED"),
        f"exit codes: {result['exit_codes']}",
        "PASS" if not result["failures"] else "FAIL: " + "; ".join(result["failures"]),
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--modes", default="gunicorn,runserver")
    parser.add_argument("--gateway-latency", type=float, default=0, help="the fake gateway's median answer, ms")
    parser.add_argument("--max-connections", type=int, default=40, help="the whole stack's bound")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown modes {unknown}; known: {list(MODES)}")
    if not os.environ.get("BROKER_URL", "").startswith("amqp") or "DATABASE_URL" not in os.environ:
        sys.exit("run it with `make soak` (scripts/with_test_services.py gives it PostgreSQL and RabbitMQ)")
    run_dir = Path(tempfile.mkdtemp(prefix="soak-"))
    run_dir.chmod(0o755)  # make serve's nginx workers (www-data when run as root) reach gunicorn's socket in it
    base_env = {
        **os.environ,
        "LOG_LEVEL": "WARNING",
        "CHECKOUT_THROTTLE": "off",
        "VAR_DIR": str(run_dir),
        "PYTHONUNBUFFERED": "1",
    }
    progress(f"seed {args.seed}, logs in {run_dir}")
    results = [soak_mode(mode, args, base_env, run_dir) for mode in modes]
    for result in results:
        print(report(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 1 if any(r["failures"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
