"""Figure 10: the gateway's pace. The Procfile's processes drain a backlog of accepted checkouts with
the fake gateway (its own process) answering at a median of 0, 50, 250 and 1,000 ms, same run
(issue 27: at 250 ms at least 150 orders/s and 0.6 of the 0 ms figure), and the release before
the gateway worker (its tree from git, as ``make upgrade-test`` takes one; its in-process gateway
answers at once) drains the same backlog: at 0 ms today's saga must be no slower.

The processes start first and warm up while the backlog is placed with the relay stopped; the
relay then lets it loose. The rate is the steady one: the middle 80% of the orders by the time
each was decided, over the time between the 10th and the 90th percentile (the first and last
orders measure the pipeline's depth, not its pace). ``GATEWAY_BENCH_BACKLOG`` (default 600),
``GATEWAY_BENCH_LATENCIES`` (ms, comma-separated) and ``GATEWAY_BENCH_MODES`` (``previous,worker``)
make it smaller.
"""

import os
import tempfile
import time
from pathlib import Path

from bench.app_figures import PROCFILE, place_backlog, seed_product, start_procfile, start_web
from bench.common import BASE_DIR, PY, Bench, median, progress, release_tree

LATENCIES = [int(ms) for ms in os.environ.get("GATEWAY_BENCH_LATENCIES", "0,50,250,1000").split(",")]
BACKLOG = int(os.environ.get("GATEWAY_BENCH_BACKLOG", "600"))
MODES = os.environ.get("GATEWAY_BENCH_MODES", "previous,worker").split(",")
# The last commit before issue 27's gateway service and worker: calls inline, in-process gateway.
PREVIOUS_RELEASE = "db33bcc"


def previous_tree(root: Path) -> Path:
    return release_tree(root, PREVIOUS_RELEASE)


def restart_gateway(bench: Bench, latency_ms: int | str) -> None:
    gateway = getattr(bench.procs, "gateway", None)
    if gateway is not None:
        bench.procs.stop(gateway)
    bench.procs.env["FAKE_GATEWAY_LATENCY"] = str(latency_ms)
    bench.procs.ensure_gateway()


def start_saga(bench: Bench, tree: Path | None) -> list:
    """Every Procfile process but the relay, warming up (today's, or the previous release's)."""
    if tree is None:
        return [bench.procs.manage(name, *args) for name, args in PROCFILE if name != "relay"]
    return [
        bench.procs.start(f"previous-{name}", [PY, "manage.py", *args], cwd=tree)
        for name, args in PROCFILE
        if name not in ("relay", "gateway-calls")
    ]


def drain_rate(bench: Bench, url: str, tree: Path | None) -> dict:
    """The backlog placed while the saga's processes warm up, then let loose by the relay."""
    saga = start_saga(bench, tree)
    started = time.time()
    accepted = place_backlog(url, BACKLOG)
    ended = time.time()
    window = "created_at >= to_timestamp(%s) AND created_at < to_timestamp(%s)"
    relay = []
    try:
        relay += [bench.procs.start("relay", [PY, "manage.py", "run_outbox_relay"], cwd=tree or BASE_DIR)]
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
        bench.stop(saga + relay)
    p10, p90, first, last, orders, confirmed = bench.db.one(
        "SELECT extract(epoch FROM percentile_disc(0.1) WITHIN GROUP (ORDER BY updated_at))::float8, "
        "extract(epoch FROM percentile_disc(0.9) WITHIN GROUP (ORDER BY updated_at))::float8, "
        "extract(epoch FROM min(updated_at))::float8, extract(epoch FROM max(updated_at))::float8, "
        f"count(*), count(*) FILTER (WHERE status = 'CONFIRMED') FROM orders_order WHERE {window}",
        [started, ended],
    )
    return {
        "accepted_per_s": accepted,
        "orders": orders,
        "confirmed": confirmed,
        "terminal_per_s": 0.8 * orders / (p90 - p10),
        "first_to_last_decided_s": last - first,
    }


def gateway_pace(bench: Bench) -> None:
    web, url = start_web(bench)
    plan = [("previous", 0)] if "previous" in MODES else []
    plan += [("worker", ms) for ms in LATENCIES] if "worker" in MODES else []
    rounds: dict[tuple[str, int], list[dict]] = {step: [] for step in plan}
    started_latency = bench.procs.env.get("FAKE_GATEWAY_LATENCY", "0")
    try:
        background = start_procfile(bench)  # the storefront learns of the product through the saga
        seed_product(bench)
        bench.stop(background)
        with tempfile.TemporaryDirectory(prefix="bench-previous-") as root:
            tree = previous_tree(Path(root)) if "previous" in MODES else None
            for n in range(1, bench.rounds + 1):
                for mode, ms in plan:
                    restart_gateway(bench, ms)
                    result = drain_rate(bench, url, tree if mode == "previous" else None)
                    rounds[(mode, ms)].append(result)
                    progress(
                        f"10 gateway pace round {n}/{bench.rounds}, {mode}, {ms} ms: {result['orders']} orders "
                        f"drained at {result['terminal_per_s']:.1f}/s ({result['confirmed']} CONFIRMED, "
                        f"first to last decided in {result['first_to_last_decided_s']:.1f} s)"
                    )
    finally:
        bench.stop([web])
        # The figures after this one measure with the gateway as the run started it (0 ms unless
        # FAKE_GATEWAY_LATENCY was set), not at this figure's last latency.
        restart_gateway(bench, started_latency)
    figure = {"backlog": BACKLOG, "target_terminal_per_s_at_250ms": 150, "target_ratio_at_250ms": 0.6}
    for mode in ("previous", "worker"):
        steps = [(m, ms) for m, ms in plan if m == mode]
        if not steps:
            continue
        rates = {ms: median([r["terminal_per_s"] for r in rounds[(m, ms)]]) for m, ms in steps}
        figure[mode] = {
            "terminal_per_s_by_latency_ms": rates,
            "ratio_to_0ms": {ms: rate / rates[0] for ms, rate in rates.items()} if 0 in rates else {},
            "rounds": {ms: rounds[(m, ms)] for m, ms in steps},
        }
    if "previous" in figure and 0 in figure.get("worker", {}).get("terminal_per_s_by_latency_ms", {}):
        figure["worker_0ms_to_previous_0ms"] = (
            figure["worker"]["terminal_per_s_by_latency_ms"][0] / figure["previous"]["terminal_per_s_by_latency_ms"][0]
        )
    bench.figures["10_gateway_pace"] = figure
