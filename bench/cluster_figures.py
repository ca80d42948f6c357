"""Figure 9: the cost of replication. The relay and the whole saga on the machine's single node and
on a three-node cluster of the bench's own (``scripts/rabbitmq_cluster.py``, every queue a quorum
queue with three members), alternately in each round of the same run."""

import contextlib
import importlib.util
import os
import random
import socket
import time
import uuid

from bench import bus
from bench.app_figures import BACKLOG, place_backlog, seed_product, start_procfile, start_web
from bench.common import BASE_DIR, PY, Bench, median, progress
from bench.relay_figures import DRAIN_ROWS

_spec = importlib.util.spec_from_file_location("rabbitmq_cluster", BASE_DIR / "scripts" / "rabbitmq_cluster.py")
rabbitmq_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rabbitmq_cluster)


def _free_base_port() -> int:
    for _ in range(50):
        base = random.randrange(15000, 40000)
        ports = [p for n in range(3) for p in (base + n, base + n + rabbitmq_cluster.DIST_PORT_OFFSET)]
        if all(socket.socket().connect_ex(("127.0.0.1", p)) != 0 for p in ports):
            return base
    raise RuntimeError("no free ports for the bench's cluster")


@contextlib.contextmanager
def on_broker(bench: Bench, url: str):
    """The bench's processes and its own broker look-ups use ``url`` meanwhile."""
    saved = os.environ["BROKER_URL"], bench.procs.env["BROKER_URL"]
    os.environ["BROKER_URL"] = bench.procs.env["BROKER_URL"] = url
    try:
        bench.procs.run([PY, "manage.py", "run_outbox_relay", "--once"])  # declares the topology there
        yield
    finally:
        os.environ["BROKER_URL"], bench.procs.env["BROKER_URL"] = saved


def saga_rate(bench: Bench, url: str) -> float:
    """A backlog of BACKLOG accepted checkouts drained to terminal orders by the Procfile's
    processes: orders/s from the first decided to the last (as figure 6)."""
    background = start_procfile(bench)
    try:
        seed_product(bench)
    finally:
        bench.stop(background)
    started = time.time()
    place_backlog(url, BACKLOG)
    ended = time.time()
    background = start_procfile(bench)
    window = "created_at >= to_timestamp(%s) AND created_at < to_timestamp(%s)"
    try:
        bench.db.wait(
            lambda: bench.db.one(f"SELECT count(*) FROM orders_order WHERE status = 'PENDING' AND {window}",
                                 [started, ended])[0] == 0,
            300,
            "the backlog to reach terminal states",
            interval=0.5,
        )  # fmt: skip
    finally:
        bench.stop(background)
    first, last, orders = bench.db.one(
        "SELECT extract(epoch FROM min(updated_at))::float8, extract(epoch FROM max(updated_at))::float8, count(*) "
        f"FROM orders_order WHERE {window}",
        [started, ended],
    )
    return (orders - 1) / (last - first)


def cluster(bench: Bench) -> None:
    """Figure 9: relay rows/s (DRAIN_ROWS, one relay) and saga orders/s (BACKLOG), single node vs cluster."""
    nodes = rabbitmq_cluster.Cluster(f"bench{uuid.uuid4().hex[:6]}", _free_base_port())
    single = os.environ["BROKER_URL"]
    web = None
    try:
        progress("9 starting a three-node cluster (about 30 s)")
        nodes.start()
        nodes.add_vhost("bench")
        replicated = nodes.url("bench")
        web, web_url = start_web(bench)  # checkout needs only the database
        rounds = []
        for n in range(1, bench.rounds + 1):
            row = {}
            for where, url in (("single", single), ("cluster", replicated)):
                with on_broker(bench, url):
                    bus.purge()
                    row[f"relay_{where}_per_s"] = bench.drain(DRAIN_ROWS, 1)
                    bus.purge()
                    row[f"saga_{where}_per_s"] = saga_rate(bench, web_url)
                    bus.purge()
            rounds.append(row)
            progress(
                f"9 cluster round {n}/{bench.rounds}: relay {row['relay_single_per_s']:,.0f}/s on one node, "
                f"{row['relay_cluster_per_s']:,.0f}/s on three; saga {row['saga_single_per_s']:.0f} orders/s on one "
                f"node, {row['saga_cluster_per_s']:.0f} on three"
            )
    finally:
        if web is not None:
            bench.stop([web])
        nodes.stop()
    keys = ("relay_single_per_s", "relay_cluster_per_s", "saga_single_per_s", "saga_cluster_per_s")
    figure = {key: median([r[key] for r in rounds]) for key in keys}
    bench.figures["9_cluster"] = figure | {
        "relay_ratio": figure["relay_cluster_per_s"] / figure["relay_single_per_s"],
        "saga_ratio": figure["saga_cluster_per_s"] / figure["saga_single_per_s"],
        "rows": DRAIN_ROWS,
        "backlog": BACKLOG,
        "rounds": rounds,
    }
