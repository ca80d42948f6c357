"""Figure 10: the gateway's pace. The Procfile's processes drain a backlog of accepted checkouts with
the fake gateway (its own process) answering at a median of 0, 50, 250 and 1,000 ms, same run, with
the calls inline (inside the consumer's transaction, one after another) and made by the gateway
worker (``GATEWAY_CALLS=worker``) (issue 27: at 250 ms at least 150 orders/s and 0.6 of the 0 ms
figure).

``GATEWAY_BENCH_BACKLOG`` (default 300), ``GATEWAY_BENCH_LATENCIES`` (ms, comma-separated) and
``GATEWAY_BENCH_MODES`` (``inline,worker``) make it smaller: inline, a backlog of 300 at 1,000 ms
takes minutes.
"""

import os
import time

from bench.app_figures import place_backlog, seed_product, start_procfile, start_web
from bench.common import Bench, median, progress

LATENCIES = [int(ms) for ms in os.environ.get("GATEWAY_BENCH_LATENCIES", "0,50,250,1000").split(",")]
BACKLOG = int(os.environ.get("GATEWAY_BENCH_BACKLOG", "300"))
MODES = os.environ.get("GATEWAY_BENCH_MODES", "inline,worker").split(",")


def restart_gateway(bench: Bench, latency_ms: int) -> None:
    gateway = getattr(bench.procs, "gateway", None)
    if gateway is not None:
        bench.procs.stop(gateway)
    bench.procs.env["FAKE_GATEWAY_LATENCY"] = str(latency_ms)
    bench.procs.ensure_gateway()


def drain_rate(bench: Bench, url: str) -> dict:
    """The backlog placed with the saga stopped, then drained: orders/s from the first decided to the last."""
    started = time.time()
    accepted = place_backlog(url, BACKLOG)
    ended = time.time()
    background = start_procfile(bench)
    if bench.procs.env.get("GATEWAY_CALLS") == "worker":
        background.append(bench.procs.manage("gateway-calls", "run_gateway_calls"))
    window = "created_at >= to_timestamp(%s) AND created_at < to_timestamp(%s)"
    try:
        bench.db.wait(
            lambda: (
                bench.db.one(
                    f"SELECT count(*) FROM orders_order WHERE status = 'PENDING' AND {window}", [started, ended]
                )[0]
                == 0
            ),
            1800,
            "the backlog to reach terminal states",
            interval=0.5,
        )
    finally:
        bench.stop(background)
    # From payments' first record of one of these orders (a batch that charges inline commits them
    # all at its end: the orders' own times would hide the calls) to the last order decided.
    first, last, orders, confirmed = bench.db.one(
        "SELECT (SELECT extract(epoch FROM min(p.created_at))::float8 FROM payments_payment p "
        "        WHERE p.order_id IN (SELECT id FROM orders_order WHERE " + window + ")), "
        "extract(epoch FROM max(updated_at))::float8, "
        f"count(*), count(*) FILTER (WHERE status = 'CONFIRMED') FROM orders_order WHERE {window}",
        [started, ended, started, ended],
    )
    return {
        "accepted_per_s": accepted,
        "orders": orders,
        "confirmed": confirmed,
        "terminal_per_s": orders / (last - first),
    }


def gateway_pace(bench: Bench) -> None:
    web, url = start_web(bench)
    rounds: dict[str, dict[int, list[dict]]] = {mode: {ms: [] for ms in LATENCIES} for mode in MODES}
    try:
        background = start_procfile(bench)  # the storefront learns of the product through the saga
        seed_product(bench)
        bench.stop(background)
        for n in range(1, bench.rounds + 1):
            for mode in MODES:
                bench.procs.env["GATEWAY_CALLS"] = mode
                for ms in LATENCIES:
                    restart_gateway(bench, ms)
                    result = drain_rate(bench, url)
                    rounds[mode][ms].append(result)
                    progress(
                        f"10 gateway pace round {n}/{bench.rounds}, {mode}, {ms} ms: {result['orders']} orders "
                        f"drained at {result['terminal_per_s']:.1f}/s ({result['confirmed']} CONFIRMED)"
                    )
    finally:
        bench.procs.env.pop("GATEWAY_CALLS", None)
        bench.stop([web])
    figure = {"backlog": BACKLOG, "target_terminal_per_s_at_250ms": 150, "target_ratio_at_250ms": 0.6}
    for mode in MODES:
        rates = {ms: median([r["terminal_per_s"] for r in rounds[mode][ms]]) for ms in LATENCIES}
        figure[mode] = {
            "terminal_per_s_by_latency_ms": rates,
            "ratio_to_0ms": {ms: rate / rates[0] for ms, rate in rates.items()} if 0 in rates else {},
            "rounds": rounds[mode],
        }
    bench.figures["10_gateway_pace"] = figure
