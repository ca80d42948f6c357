"""Figure 14: the cost of encryption (issue 46), same run. In each round, figure 6's drain (a
backlog of accepted checkouts drained to terminal orders by the Procfile's processes) runs once
per configuration of ``orders.order.created``, the web and the Procfile's processes all started
with its ``EVENT_VERSIONS``: *clear* (pinned to v2: the token written as v1 and v2 did, nothing
encrypted or decrypted; the downcasters and upcasters between v2 and v4 return the payload as
it is), *token* (pinned to v3: the payment token encrypted for payments) and *sealed* (no pin,
v4: the token encrypted and the customer's id sealed under the customer's own key). The order
is reversed every other round, so drift does not favour one, and a warm-up drain (not counted)
comes first. Per configuration: the checkouts'
accept rate and the drain, from the relay's first publish to the last order decided (figure
6's measure, first decided to last, is kept beside it). Ratios are token / clear and sealed /
clear, per round, median; the target: sealed at least 0.9 of clear. ``ENCRYPTION_BENCH_BACKLOG``
(default figure 6's 1,500) makes it smaller.
"""

import contextlib
import os

from bench import bus
from bench.app_figures import BACKLOG as FIGURE_6_BACKLOG
from bench.app_figures import (
    WINDOW,
    drain_window,
    place_window,
    seed_product,
    start_procfile,
    start_web,
    wait_decided,
)
from bench.common import Bench, median, progress

BACKLOG = int(os.environ.get("ENCRYPTION_BENCH_BACKLOG", FIGURE_6_BACKLOG))
EVENT = "orders.order.created"
CONFIGURATIONS = {"clear": 2, "token": 3, "sealed": None}  # the version EVENT_VERSIONS pins; None: the newest
METRICS = ("accepted_per_s", "drained_per_s", "terminal_per_s")
TARGET_SEALED_TO_CLEAR = 0.9
WARM_UP = 200  # orders
SAGA_QUEUES = [queue for queue in bus.TOPOLOGY_QUEUES if queue != "bench_queue"]


def settle(bench: Bench) -> None:
    """Wait for the saga's hops after the last decision (shipping, the event log) to be done, so the
    next configuration's drain does not inherit them."""
    bench.db.wait(
        lambda: bench.db.pending() == 0 and not sum(map(bus.depth, SAGA_QUEUES)),
        120,
        "the outbox and the saga's queues to empty",
        interval=0.2,
    )


@contextlib.contextmanager
def encryption(bench: Bench, configuration: str):
    """Every process started meanwhile writes ``orders.order.created`` as ``configuration`` says
    (whatever pin the run's own environment carries); yields the URL of a web server doing so."""
    env = bench.procs.env
    saved = env.pop("EVENT_VERSIONS", None)
    if pin := CONFIGURATIONS[configuration]:
        env["EVENT_VERSIONS"] = f"{EVENT}={pin}"
    web, url = start_web(bench)
    try:
        yield url
    finally:
        bench.stop([web])
        env.pop("EVENT_VERSIONS", None)
        if saved is not None:
            env["EVENT_VERSIONS"] = saved


def check_written(bench: Bench, configuration: str, window: tuple[float, float]) -> None:
    """The backlog's events were written in the configuration's version: a pin the processes did
    not take would compare a configuration with itself and read as no cost."""
    sql = (
        "SELECT array_agg(DISTINCT schema_version ORDER BY schema_version) FROM messaging_outbox "
        f"WHERE event_type = %s AND correlation_id IN (SELECT id::text FROM orders_order WHERE {WINDOW})"
    )
    written = bench.db.one(sql, [EVENT, *window])[0] or []
    pin = CONFIGURATIONS[configuration]
    newest_pinned = max(version for version in CONFIGURATIONS.values() if version)
    if not (written == [pin] if pin else len(written) == 1 and written[0] > newest_pinned):
        raise RuntimeError(f"figure 14, {configuration}: {EVENT} written as v{written}, not as configured")


def configuration_round(bench: Bench, configuration: str, n: int) -> dict:
    """One configuration's part of round ``n``: its backlog placed, then drained."""
    with encryption(bench, configuration) as url:
        accepted, window = place_window(url, BACKLOG)  # the saga's processes are stopped meanwhile
        result, background = drain_window(bench, window)
        try:
            check_written(bench, configuration, window)
            settle(bench)
        finally:
            bench.stop(background)
    progress(
        f"14 encryption round {n}/{bench.rounds}, {configuration}: {result['orders']} checkouts accepted at "
        f"{accepted:.0f}/s, drained to terminal at {result['drained_per_s']:.0f} orders/s from the first publish "
        f"({result['terminal_per_s']:.0f}/s from the first decided; {result['confirmed']} CONFIRMED)"
    )
    return result | {"accepted_per_s": accepted}


def encryption_cost(bench: Bench) -> None:
    """Figure 14: figure 6's drain with orders.order.created clear, its token encrypted, and sealed."""
    bus.purge()
    with encryption(bench, "sealed") as url:
        background = start_procfile(bench)  # the storefront learns of the product through the saga
        try:
            seed_product(bench)
            # A drain not counted: the first configuration measured would otherwise also pay for
            # the cold caches (PostgreSQL's, the processes' first imports).
            _, window = place_window(url, min(BACKLOG, WARM_UP))
            wait_decided(bench, window, 120, "the warm-up orders to reach terminal states")
            settle(bench)
        finally:
            bench.stop(background)
    rounds = []
    for n in range(1, bench.rounds + 1):
        order = list(CONFIGURATIONS) if n % 2 else list(reversed(CONFIGURATIONS))
        measured = {name: configuration_round(bench, name, n) for name in order}
        rounds.append({name: measured[name] for name in CONFIGURATIONS} | {"order": order})
    figure = {name: {key: median([r[name][key] for r in rounds]) for key in METRICS} for name in CONFIGURATIONS}
    bench.figures["14_encryption"] = figure | {
        "ratio": {
            f"{name}_to_clear": {key: median([r[name][key] / r["clear"][key] for r in rounds]) for key in METRICS}
            for name in ("token", "sealed")
        },
        "target_sealed_to_clear": TARGET_SEALED_TO_CLEAR,
        "pinned_versions": CONFIGURATIONS,
        "backlog": BACKLOG,
        "rounds": rounds,
    }
