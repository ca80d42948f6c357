"""Figures 5 to 7: a consumer, the whole saga under load, and the checkout endpoint."""

import http.client
import os
import re
import shutil
import subprocess
import time
import urllib.request
import uuid

from bench import bus
from bench.common import BASE_DIR, Bench, free_port, median, percentile, progress

CONSUMER_MESSAGES = 3_000
TICK = "bench.consumer.tick"  # handled by bench.benchapp's handler on the inventory consumer
WRK_CONNECTIONS = 8
E2E_SECONDS = 15
WEB_SECONDS = 8
WORKERS = min(2, os.cpu_count() or 1)  # more gunicorn workers than cores lowered throughput here
STOCK = 1_000_000_000
PACED_RATE = 10.0  # orders/s, well below what the saga sustains here
PACED_SECONDS = 10


def consumers(bench: Bench) -> None:
    """Figure 5: one consumer process vs a bare consume-and-ack loop vs its transaction in SQL."""
    bus.bind("inventory_queue", TICK)
    rounds = []
    for n in range(1, bench.rounds + 1):
        bus.purge()
        bench.db.run("TRUNCATE messaging_inbox")
        bench.worker("preload", CONSUMER_MESSAGES, TICK)
        bus.wait_depth("inventory_queue", CONSUMER_MESSAGES, 60)
        consumer = bench.procs.manage("consumer", "run_consumers", "inventory")
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
        handled = (CONSUMER_MESSAGES - 1) / (last - first)
        bus.purge()
        bench.worker("preload", CONSUMER_MESSAGES, TICK)
        bus.wait_depth("inventory_queue", CONSUMER_MESSAGES, 60)
        bare = bench.worker("consume-ack", "inventory_queue", CONSUMER_MESSAGES, 60)["rate"]
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
        "target_ratio": 0.5,
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


def end_to_end(bench: Bench) -> None:
    """Figure 6: concurrent checkouts through the API with relay and consumers running."""
    bus.purge()
    bench.db.reset_outbox()
    background = [
        *bench.start_relays(1),
        bench.procs.manage("consumers", "run_consumers", "orders", "payments", "inventory"),
        bench.procs.manage("consumers", "run_consumers", "events"),
    ]
    web, url = start_web(bench)
    rounds = []
    try:
        seed_product(bench)
        paced = paced_latency(bench, url)
        for n in range(1, bench.rounds + 1):
            started = time.time()
            load = wrk(url, "/api/checkout/", E2E_SECONDS)
            ended = time.time()
            window = "created_at >= to_timestamp(%s) AND created_at < to_timestamp(%s)"
            pending_sql = f"SELECT count(*) FROM orders_order WHERE status = 'PENDING' AND {window}"
            params = [started, ended]
            bench.db.wait(
                lambda sql=pending_sql, params=params: bench.db.one(sql, params)[0] == 0,
                90,
                "every order of the round to reach a terminal state",
                interval=0.5,
            )
            rows = bench.db.all(
                "SELECT status, extract(epoch FROM updated_at)::float8, "
                f"extract(epoch FROM updated_at - created_at)::float8 FROM orders_order WHERE {window}",
                [started, ended],
            )
            confirmed_ms = [lag * 1000 for status, _, lag in rows if status == "CONFIRMED"]
            finished = max(at for _, at, _ in rows)
            rounds.append(
                {
                    "checkouts_per_s": load["rate"],
                    "orders": len(rows),
                    "confirmed": len(confirmed_ms),
                    "terminal_per_s": len(rows) / (finished - started),
                    "confirmed_p50_ms": percentile(confirmed_ms, 0.5),
                    "confirmed_p99_ms": percentile(confirmed_ms, 0.99),
                    "non_2xx": load["non_2xx"],
                    "http_p50_ms": load["p50"],
                    "http_p99_ms": load["p99"],
                }
            )
            r = rounds[-1]
            progress(
                f"6 end to end round {n}/{bench.rounds}: {r['checkouts_per_s']:.0f} checkouts/s, "
                f"{r['terminal_per_s']:.0f} orders/s terminal ({r['confirmed']}/{r['orders']} CONFIRMED), "
                f"checkout to CONFIRMED p50 {r['confirmed_p50_ms']:.0f} ms p99 {r['confirmed_p99_ms']:.0f} ms"
            )
    finally:
        bench.stop([web, *background])
    bench.figures["6_end_to_end"] = {
        key: median([r[key] for r in rounds])
        for key in (
            "checkouts_per_s",
            "terminal_per_s",
            "confirmed_p50_ms",
            "confirmed_p99_ms",
            "http_p50_ms",
            "http_p99_ms",
        )
    } | {
        "connections": WRK_CONNECTIONS,
        "seconds": E2E_SECONDS,
        "gunicorn_workers": WORKERS,
        "rounds": rounds,
        "paced": paced,
    }


def paced_latency(bench: Bench, url: str) -> dict:
    """Checkout to CONFIRMED at a pace the saga keeps up with (open loop, PACED_RATE orders/s)."""
    host, port = url.removeprefix("http://").split(":")
    body = '{"customer_id":"bench","items":[{"sku":"BENCH","quantity":1}],"payment_token":"tok_visa"}'
    started = time.time()
    count = int(PACED_RATE * PACED_SECONDS)
    for n in range(count):
        if (pause := started + n / PACED_RATE - time.time()) > 0:
            time.sleep(pause)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request(
                "POST",
                "/api/checkout/",
                body,
                {"Content-Type": "application/json", "Idempotency-Key": f"paced-{uuid.uuid4()}"},
            )
            if (status := conn.getresponse().status) != 201:
                raise RuntimeError(f"checkout answered {status}")
        finally:
            conn.close()
    ended = time.time()
    window = "created_at >= to_timestamp(%s) AND created_at < to_timestamp(%s)"
    bench.db.wait(
        lambda: (
            bench.db.one(f"SELECT count(*) FROM orders_order WHERE status = 'PENDING' AND {window}", [started, ended])[
                0
            ]
            == 0
        ),
        60,
        "the paced orders to finish",
        interval=0.2,
    )
    lags = [
        lag * 1000
        for (lag,) in bench.db.all(
            "SELECT extract(epoch FROM updated_at - created_at)::float8 FROM orders_order "
            f"WHERE status = 'CONFIRMED' AND {window}",
            [started, ended],
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
        f"6 paced: {count} checkouts at {PACED_RATE:.0f}/s, {len(lags)} CONFIRMED, checkout to CONFIRMED "
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
