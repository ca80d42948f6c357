"""Figures 5 to 7: a consumer, the whole saga under load, and the checkout endpoint."""

import http.client
import os
import re
import shutil
import subprocess
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import bus
from bench.common import BASE_DIR, Bench, free_port, median, percentile, progress

CONSUMER_MESSAGES = 3_000
CONSUMER_BATCH_SIZE = 50  # the default; figure 5 measures what the defaults give
TICK = "bench.consumer.tick"  # handled by the bench context's consumer (bench/benchapp/context.toml)
WRK_CONNECTIONS = 8
E2E_SECONDS = 15
WEB_SECONDS = 8
WORKERS = min(2, os.cpu_count() or 1)  # more gunicorn workers than cores lowered throughput here
STOCK = 1_000_000_000
PACED_RATE = 10.0  # orders/s, well below what the saga sustains here
PACED_SECONDS = 10


def consumer_rate(bench: Bench, env: dict[str, str] | None = None, cwd: Path = BASE_DIR) -> float:
    """Messages/s of one consumer process (``run_consumers bench``, of this tree or of ``cwd``)
    through its preloaded queue, from its first inbox row to its last."""
    bus.purge()
    bench.db.run("TRUNCATE messaging_inbox")
    bench.worker("preload", CONSUMER_MESSAGES, TICK)
    bus.wait_depth("bench_queue", CONSUMER_MESSAGES, 60)
    consumer = bench.procs.manage("consumer", "run_consumers", "bench", env=env, cwd=cwd)
    try:
        bench.db.wait(
            lambda: bench.db.one("SELECT count(*) FROM messaging_inbox")[0] >= CONSUMER_MESSAGES,
            180,
            "the consumer to handle every message",
            interval=0.2,
        )
    finally:
        bench.procs.stop(consumer)
    first, last = bench.db.one(
        "SELECT extract(epoch FROM min(handled_at))::float8, extract(epoch FROM max(handled_at))::float8 "
        "FROM messaging_inbox"
    )
    return (CONSUMER_MESSAGES - 1) / (last - first)


def consumers(bench: Bench) -> None:
    """Figure 5: one consumer process vs a bare consume-and-ack loop vs its transaction in SQL."""
    rounds = []
    for n in range(1, bench.rounds + 1):
        handled = consumer_rate(bench)
        bus.purge()
        bench.worker("preload", CONSUMER_MESSAGES, TICK)
        bus.wait_depth("bench_queue", CONSUMER_MESSAGES, 60)
        bare = bench.worker("consume-ack", "bench_queue", CONSUMER_MESSAGES, 60)["rate"]
        sql = bench.worker("inbox-sql", CONSUMER_MESSAGES, 60)["rate"]
        lower = min(bare, sql)
        rounds.append({"consumer": handled, "consume_ack": bare, "sql": sql, "ratio": handled / lower})
        progress(
            f"5 consumer round {n}/{bench.rounds}: consumer {handled:,.0f}/s, consume-and-ack {bare:,.0f}/s, "
            f"its transaction in SQL {sql:,.0f}/s"
        )
    bus.purge()
    bench.db.reset_outbox()
    bench.figures["5_consumer"] = {
        "consumer_per_s": median([r["consumer"] for r in rounds]),
        "consume_ack_per_s": median([r["consume_ack"] for r in rounds]),
        "sql_per_s": median([r["sql"] for r in rounds]),
        "ratio": median([r["ratio"] for r in rounds]),
        "target_ratio": 2.0,
        "batch_size": CONSUMER_BATCH_SIZE,
        "rounds": rounds,
    }


# --- the web ----------------------------------------------------------------------------------
def ensure_wrk() -> str:
    """wrk from Debian's packages; installed here if missing (the bench runs as root)."""
    found = shutil.which("wrk")
    if found:
        return found
    progress("installing wrk from Debian's packages (apt-get install wrk)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "wrk"]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
        subprocess.run(install, env=env, capture_output=True, check=True)
    return shutil.which("wrk") or "wrk"


def start_web(bench: Bench):
    port = free_port()
    proc = bench.procs.start(
        "gunicorn",
        [
            str(BASE_DIR / ".venv" / "bin" / "gunicorn"),
            "config.wsgi",
            f"--workers={WORKERS}",
            f"--bind=127.0.0.1:{port}",
            "--graceful-timeout=5",
            "--timeout=60",
        ],
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/api/products/", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    bench.db.wait(up, 60, "gunicorn", interval=0.2)
    return proc, url


def wrk(url: str, path: str, seconds: int, connections: int = WRK_CONNECTIONS) -> dict:
    """Closed loop: ``connections`` clients, each POSTing again as soon as it has its answer."""
    env = {**os.environ, "BENCH_PATH": path, "BENCH_RUN": uuid.uuid4().hex[:12]}
    out = subprocess.run(
        [
            ensure_wrk(),
            "-t1",
            f"-c{connections}",
            f"-d{seconds}s",
            "--timeout=10s",
            "--latency",
            "-s",
            str(BASE_DIR / "bench" / "wrk" / "post.lua"),
            url,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {
        "rate": rate,
        "non_2xx": int(bad.group(1)) if bad else 0,
        "socket_errors": errors.group(0) if errors else "",
        "p50": _wrk_latency(out, "50%"),
        "p99": _wrk_latency(out, "99%"),
    }


def _wrk_latency(out: str, label: str) -> float:
    match = re.search(rf"^\s+{re.escape(label)}\s+([\d.]+)(us|ms|s)", out, re.MULTILINE)
    if not match:
        return float("nan")
    return float(match.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[match.group(2)]


def seed_product(bench: Bench) -> None:
    bench.procs.run(
        [
            str(BASE_DIR / ".venv" / "bin" / "python"),
            "manage.py",
            "shell",
            "-c",
            "from decimal import Decimal; from inventory.services import product_upsert; "
            f"product_upsert(sku='BENCH', name='Bench item', price=Decimal('9.99'), stock={STOCK})",
        ]
    )
    bench.db.wait(
        lambda: bench.db.one("SELECT count(*) FROM orders_storefront_product WHERE sku = 'BENCH'")[0] == 1,
        60,
        "the storefront copy of the bench product",
    )


PROCFILE = [  # what `make run` starts besides the web server (Procfile), with their defaults
    ("relay", ["run_outbox_relay"]),
    ("consumers", ["run_consumers", "--except", "orders,events"]),
    ("orders-consumers", ["run_consumers", "orders", "events"]),
    ("deadline", ["expire_pending_orders", "--loop"]),
    ("gateway-calls", ["run_gateway_calls"]),
]
BACKLOG = 1_500
COMMIT_SECONDS = 3.0


def start_procfile(bench: Bench) -> list:
    procs = [bench.procs.manage(name, *args) for name, args in PROCFILE]
    bench.db.wait(lambda: bench.db.relay_backends() >= 2, 60, "the relay's two pipelines to listen")
    return procs


CHECKOUT_BODY = '{"customer_id":"bench","items":[{"sku":"BENCH","quantity":1}],"payment_token":"tok_visa"}'


def post_checkout(url: str, key: str, *, timeout: float) -> None:
    """One checkout through the API, on a connection of its own; anything but 201 raises."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        headers = {"Content-Type": "application/json", "Idempotency-Key": key}
        conn.request("POST", "/api/checkout/", CHECKOUT_BODY, headers)
        if (status := conn.getresponse().status) != 201:
            raise RuntimeError(f"checkout answered {status}")
    finally:
        conn.close()


def place_backlog(url: str, count: int, clients: int = WRK_CONNECTIONS) -> float:
    """``count`` checkouts through the API from ``clients`` threads; the rate they were accepted at."""
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(lambda n: post_checkout(url, f"b-{uuid.uuid4()}", timeout=30), range(count)))
    return count / (time.monotonic() - started)


WINDOW = "created_at >= to_timestamp(%s) AND created_at < to_timestamp(%s)"  # orders placed in a window


def wait_decided(bench: Bench, window: tuple[float, float], timeout: float, what: str) -> None:
    """Wait until no order placed in ``window`` is PENDING."""
    sql = f"SELECT count(*) FROM orders_order WHERE status = 'PENDING' AND {WINDOW}"
    bench.db.wait(lambda: bench.db.one(sql, list(window))[0] == 0, timeout, what, interval=0.2)


def place_window(url: str, count: int) -> tuple[float, tuple[float, float]]:
    """A backlog of ``count`` checkouts (``place_backlog``): the rate they were accepted at, and
    the window of time in which they were created."""
    started = time.time()
    accepted = place_backlog(url, count)
    return accepted, (started, time.time())


def drain_window(bench: Bench, window: tuple[float, float]) -> tuple[dict, list]:
    """Start the Procfile's processes and time them draining the orders placed in ``window`` to
    terminal states; its numbers, and the processes, still running. ``terminal_per_s`` (figure
    6's) runs from the first order decided to the last, ``drained_per_s`` from the relay's first
    publish of one of them to the last decided: the fair one when orders are decided in a wave
    at the end, as orchestrated ones are (figure 12)."""
    background = start_procfile(bench)
    try:
        wait_decided(bench, window, 300, "the backlog to reach terminal states")
    except BaseException:
        bench.stop(background)
        raise
    first, last, orders, confirmed, published = bench.db.one(
        "SELECT extract(epoch FROM min(updated_at))::float8, extract(epoch FROM max(updated_at))::float8, "
        "count(*), count(*) FILTER (WHERE status = 'CONFIRMED'), (SELECT extract(epoch FROM min(published_at))::float8 "
        f"FROM messaging_outbox WHERE correlation_id IN (SELECT id::text FROM orders_order WHERE {WINDOW})) "
        f"FROM orders_order WHERE {WINDOW}",
        [*window, *window],
    )
    result = {
        "orders": orders,
        "confirmed": confirmed,
        "terminal_per_s": (orders - 1) / (last - first),
        "drained_per_s": orders / (last - published),
    }
    return result, background


def end_to_end(bench: Bench) -> None:
    """Figure 6: the Procfile's processes draining a backlog of accepted checkouts to terminal
    orders, beside PostgreSQL's single-row commits/s in the same round; then the paced latency."""
    bus.purge()
    bench.db.reset_outbox()
    web, url = start_web(bench)
    background = start_procfile(bench)
    rounds = []
    try:
        seed_product(bench)
        paced = paced_latency(bench, url)
        for n in range(1, bench.rounds + 1):
            bench.stop(background)  # the checkouts pile up, accepted, in the outbox
            accepted, window = place_window(url, BACKLOG)
            commits = bench.worker("insert-rate", COMMIT_SECONDS)["rate"]
            drained, background = drain_window(bench, window)
            rate = drained["terminal_per_s"]
            rounds.append(
                {
                    "accepted_per_s": accepted,
                    "orders": drained["orders"],
                    "confirmed": drained["confirmed"],
                    "terminal_per_s": rate,
                    "single_row_commits_per_s": commits,
                    "ratio_to_commits": rate / commits,
                }
            )
            progress(
                f"6 end to end round {n}/{bench.rounds}: {drained['orders']} checkouts accepted at {accepted:.0f}/s, "
                f"drained to terminal at {rate:.0f} orders/s ({drained['confirmed']} CONFIRMED); single-row commits "
                f"{commits:,.0f}/s (ratio {rate / commits:.3f})"
            )
    finally:
        bench.stop([web, *background])
    bench.figures["6_end_to_end"] = {
        key: median([r[key] for r in rounds])
        for key in ("accepted_per_s", "terminal_per_s", "single_row_commits_per_s", "ratio_to_commits")
    } | {
        "backlog": BACKLOG,
        "processes": [" ".join(args) for _, args in PROCFILE],
        "target_terminal_per_s": 150,
        "target_ratio_to_commits": 0.03,
        "rounds": rounds,
        "paced": paced | {"target_p50_ms": 50, "target_p99_ms": 150},
    }


def paced_latency(bench: Bench, url: str, label: str = "6 paced") -> dict:
    """Checkout to CONFIRMED at a pace the saga keeps up with (open loop, PACED_RATE orders/s)."""
    started = time.time()
    count = int(PACED_RATE * PACED_SECONDS)
    for n in range(count):
        if (pause := started + n / PACED_RATE - time.time()) > 0:
            time.sleep(pause)
        post_checkout(url, f"paced-{uuid.uuid4()}", timeout=10)
    window = (started, time.time())
    wait_decided(bench, window, 60, "the paced orders to finish")
    lags = [
        lag * 1000
        for (lag,) in bench.db.all(
            "SELECT extract(epoch FROM updated_at - created_at)::float8 FROM orders_order "
            f"WHERE status = 'CONFIRMED' AND {WINDOW}",
            list(window),
        )
    ]
    result = {
        "rate": PACED_RATE,
        "orders": count,
        "confirmed": len(lags),
        "confirmed_p50_ms": percentile(lags, 0.5),
        "confirmed_p99_ms": percentile(lags, 0.99),
    }
    progress(
        f"{label}: {count} checkouts at {PACED_RATE:.0f}/s, {len(lags)} CONFIRMED, checkout to CONFIRMED "
        f"p50 {result['confirmed_p50_ms']:.0f} ms, p99 {result['confirmed_p99_ms']:.0f} ms"
    )
    return result


def web(bench: Bench) -> None:
    """Figure 7: the checkout endpoint vs a bare DRF endpoint inserting one row, same server."""
    server, url = start_web(bench)
    rounds = []
    try:
        if not bench.db.one("SELECT count(*) FROM orders_storefront_product WHERE sku = 'BENCH'")[0]:
            raise RuntimeError("figure 7 needs the bench product of figure 6")
        for n in range(1, bench.rounds + 1):
            checkout = wrk(url, "/api/checkout/", WEB_SECONDS)
            bare = wrk(url, "/bench/bare/", WEB_SECONDS)
            if checkout["non_2xx"] or bare["non_2xx"]:
                raise RuntimeError(f"failed requests: checkout {checkout['non_2xx']}, bare {bare['non_2xx']}")
            rounds.append(
                {"checkout": checkout["rate"], "bare": bare["rate"], "ratio": checkout["rate"] / bare["rate"]}
            )
            progress(
                f"7 web round {n}/{bench.rounds}: checkout {checkout['rate']:.0f} req/s, "
                f"bare insert {bare['rate']:.0f} req/s"
            )
    finally:
        bench.stop([server])
    bench.figures["7_web"] = {
        "checkout_per_s": median([r["checkout"] for r in rounds]),
        "bare_per_s": median([r["bare"] for r in rounds]),
        "ratio": median([r["ratio"] for r in rounds]),
        "target_ratio": 0.5,
        "gunicorn_workers": WORKERS,
        "connections": WRK_CONNECTIONS,
        "rounds": rounds,
    }
