"""Figure 12: choreography against orchestration (``SAGA_STYLE``), same run. In each round, each
style in turn (choreography, orchestration, choreography, ...) runs as deployed: the web and the
Procfile's processes with neither ``SAGA_STYLE`` nor ``ORCHESTRATOR`` set (no orchestrator), or
all of them with ``SAGA_STYLE=orchestration`` (the orchestrator's consumer lands in the
``consumers`` process). Per style and round, as figure 6: a backlog of accepted checkouts drained
to terminal orders; the messages each of those orders cost once the saga is done (outbox rows,
and inbox rows, i.e. deliveries handled, the event log's included, whose correlation id is the
order's); then checkout -> CONFIRMED paced at 10 orders/s, p50 / p99. In choreography an order
is CONFIRMED before shipping follows; in orchestration after the shipment is created. The ratio
is orchestration / choreography, per round, median. ``SAGA_BENCH_BACKLOG`` (default 1,000) makes
it smaller.

The drain rate runs from the relay's first publish of the backlog to the last order decided, not
from the first order decided (figure 6's): orchestrated orders are decided in one wave at the
end (the orchestrator's queue holds every ``order.created`` before the first reply, so each step
runs for the whole backlog before the next), which figure 6's measure would count as a fast
drain. Both are kept in each round.
"""

import contextlib
import os
import time

from bench import bus
from bench.app_figures import (
    PACED_RATE,
    WINDOW,
    drain_window,
    paced_latency,
    place_window,
    seed_product,
    start_procfile,
    start_web,
)
from bench.common import Bench, median, progress

BACKLOG = int(os.environ.get("SAGA_BENCH_BACKLOG", "1000"))
STYLES = {"choreography": {}, "orchestration": {"SAGA_STYLE": "orchestration"}}
STYLE_VARS = ("SAGA_STYLE", "ORCHESTRATOR")
ORCHESTRATOR_QUEUE = "orchestrator_queue"
METRICS = ("drained_per_s", "confirmed_p50_ms", "confirmed_p99_ms", "outbox_per_order", "deliveries_per_order")
SETTLED_SECONDS = 2.0  # the counts unchanged this long: the saga's last hops are done


@contextlib.contextmanager
def saga_style(bench: Bench, style: str):
    """Every process started meanwhile runs in ``style``; yields the URL of a web server in it."""
    env = bench.procs.env
    saved = {key: env.pop(key) for key in STYLE_VARS if key in env}
    env.update(STYLES[style])
    if style == "choreography":
        # RabbitMQ keeps the queue an orchestrated round declared, bound to the saga's events;
        # nothing consumes it in choreography, so it goes (the next orchestrated relay declares it).
        bus.delete(ORCHESTRATOR_QUEUE)
    web, url = start_web(bench)
    try:
        yield url
    finally:
        bench.stop([web])
        for key in STYLE_VARS:
            env.pop(key, None)
        env.update(saved)


def messages(bench: Bench, window: tuple[float, float]) -> dict:
    """Outbox rows and inbox rows (deliveries handled) per order placed in ``window``, once their
    counts have stopped changing."""
    ids = f"SELECT id::text FROM orders_order WHERE {WINDOW}"
    sql = (
        f"SELECT (SELECT count(*) FROM messaging_outbox WHERE correlation_id IN ({ids})), "
        f"(SELECT count(*) FROM messaging_inbox WHERE correlation_id IN ({ids})), "
        f"(SELECT count(*) FROM orders_order WHERE {WINDOW})"
    )
    seen = {"counts": None, "since": 0.0}

    def settled() -> bool:
        counts = bench.db.one(sql, [*window] * 3)
        if counts != seen["counts"]:
            seen.update(counts=counts, since=time.monotonic())
        return time.monotonic() - seen["since"] >= SETTLED_SECONDS

    bench.db.wait(settled, 120, "the saga's messages to settle", interval=0.25)
    outbox, inbox, orders = seen["counts"]
    return {"outbox_per_order": outbox / orders, "deliveries_per_order": inbox / orders}


def style_round(bench: Bench, style: str, n: int) -> dict:
    """One style's part of round ``n``: the backlog drained, its messages counted, then the paced latency."""
    with saga_style(bench, style) as url:
        accepted, window = place_window(url, BACKLOG)  # the saga's processes are stopped meanwhile
        result, background = drain_window(bench, window)
        try:
            result |= {"accepted_per_s": accepted} | messages(bench, window)
            progress(
                f"12 saga styles round {n}/{bench.rounds}, {style}: {result['orders']} checkouts accepted at "
                f"{accepted:.0f}/s, drained to terminal at {result['drained_per_s']:.0f} orders/s from the first "
                f"publish ({result['terminal_per_s']:.0f}/s from the first decided; {result['confirmed']} CONFIRMED); "
                f"{result['outbox_per_order']:.2f} outbox rows and "
                f"{result['deliveries_per_order']:.2f} deliveries per order"
            )
            paced = paced_latency(bench, url, f"12 saga styles round {n}/{bench.rounds}, {style}, paced")
        finally:
            bench.stop(background)
    return result | {key: paced[key] for key in ("confirmed_p50_ms", "confirmed_p99_ms")}


def saga_styles(bench: Bench) -> None:
    """Figure 12: the saga choreographed and orchestrated, alternately in each round."""
    rounds = []
    try:
        bus.purge()
        with saga_style(bench, "choreography"):
            background = start_procfile(bench)  # the storefront learns of the product through the saga
            try:
                seed_product(bench)
            finally:
                bench.stop(background)
        for n in range(1, bench.rounds + 1):
            rounds.append({style: style_round(bench, style, n) for style in STYLES})
    finally:
        bus.delete(ORCHESTRATOR_QUEUE)  # later figures run without the orchestrator
    figure = {style: {key: median([r[style][key] for r in rounds]) for key in METRICS} for style in STYLES}
    bench.figures["12_saga_styles"] = figure | {
        "ratio": {key: median([r["orchestration"][key] / r["choreography"][key] for r in rounds]) for key in METRICS},
        "backlog": BACKLOG,
        "paced_rate": PACED_RATE,
        "rounds": rounds,
    }
