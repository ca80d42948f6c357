"""A three-node RabbitMQ cluster of a test's own (``scripts/rabbitmq_cluster.py``) and the node-loss scenario.

The cluster gets node names and ports no other run uses and is always stopped (``finally`` and
``atexit``), whatever the test did to its nodes. The scenario is shared by the short fault test
and ``make chaos`` (which imports nothing from ``tests``).
"""

import atexit
import contextlib
import importlib.util
import os
import random
import time
import uuid
from collections.abc import Callable, Iterator

from faultlib.faults import Injection
from faultlib.load import CATALOG, OrderLoad
from faultlib.ports import free_base
from faultlib.processes import BASE_DIR, ProcessGroup, wait_until
from faultlib.saga import seed_catalog
from faultlib.scenarios import FAST_RETRIES, Outcome, _settle
from faultlib.steps import offered

_spec = importlib.util.spec_from_file_location("rabbitmq_cluster", BASE_DIR / "scripts" / "rabbitmq_cluster.py")
rabbitmq_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rabbitmq_cluster)
Cluster = rabbitmq_cluster.Cluster

CONNECTED_EVENTS = ("relay connected to the broker", "consuming")
HEARTBEAT = "5"  # seconds: a frozen node is noticed after two missed heartbeats
BASES = (10000, 12700)  # node 1's AMQP port: AMQP 10000 to 12702, distribution 30000 to 32702


def _node_ports(nodes: int) -> Callable[[int], list[int]]:
    """The AMQP ports from a base, and their distribution ports (20000 above)."""
    return lambda base: [p for n in range(nodes) for p in (base + n, base + n + rabbitmq_cluster.DIST_PORT_OFFSET)]


@contextlib.contextmanager
def own_cluster(nodes: int = 3) -> Iterator[tuple[Cluster, str]]:
    """A running cluster of ``nodes`` nodes and a vhost on it: (cluster, vhost). One node: a broker
    whose node-wide state (a memory alarm) a test may change without touching any other run's."""
    name = f"sagatest{uuid.uuid4().hex[:6]}"
    cluster = Cluster(name, free_base(random.Random(), *BASES, _node_ports(nodes)), nodes=nodes)
    atexit.register(cluster.stop)  # a test interrupted by a signal still stops its nodes
    try:
        cluster.start()
        vhost = "shop"
        cluster.add_vhost(vhost)
        yield cluster, vhost
    finally:
        cluster.stop()
        atexit.unregister(cluster.stop)


@contextlib.contextmanager
def observed_on(cluster: Cluster, vhost: str) -> Iterator[None]:
    """``faultlib.invariants`` reads queue depths from this cluster's vhost meanwhile."""
    saved = {k: os.environ.get(k) for k in ("TEST_BROKER_VHOST", "TEST_BROKER_NODE")}
    os.environ["TEST_BROKER_VHOST"] = vhost
    os.environ["TEST_BROKER_NODE"] = ",".join(n.name for n in cluster.nodes)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def connected_ports(group: ProcessGroup) -> list[list[int]]:
    """Per process of the group that talks to the broker (not the fake gateway, nor the gateway
    worker), the AMQP port of each broker connection it opened, in order."""
    return [
        [
            int(line["broker"].split("@", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
            for line in group.log_lines(proc)
            if line.get("event") in CONNECTED_EVENTS and "broker" in line
        ]
        for name, proc, _ in group.procs
        if proc is not group.gateway and name != "gateway-calls"
    ]


def _place_for(load: OrderLoad, seconds: float, orders: int, pace: float) -> None:
    """Keep placing orders (up to ``orders``, one per ``pace`` s) for ``seconds``; let the full time pass."""
    until = time.monotonic() + seconds
    while len(load.orders) < orders and time.monotonic() < until:
        load.place()
        time.sleep(pace)
    time.sleep(max(0.0, until - time.monotonic()))


def node_loss(
    group: ProcessGroup,
    rng: random.Random,
    cluster: Cluster,
    *,
    orders: int,
    kill_after: int,
    down_for: float,
    kill_in_turn: tuple[int, ...] = (1,),
    freeze_for: float = 0.0,
    pace: float = 0.02,
    quiet: float = 180,
) -> Outcome:
    """Nodes SIGKILLed mid-saga in turn, each started again ``down_for`` seconds later, while orders
    keep coming. Node 1 first: every process is connected to it (first in ``BROKER_URL``). Killing
    each of the three in turn kills every queue's leader once. With ``freeze_for``, then the node
    the relay moved to is frozen (SIGSTOP) that long, longer than the heartbeat, and resumed.
    Orders come one per ``pace`` seconds (plus the checkout's own time) until ``orders`` are placed.
    Every order must end CONFIRMED without a process restarted by hand."""
    from faultlib.faults import Restartable

    env = {**FAST_RETRIES, "BROKER_HEARTBEAT": HEARTBEAT}
    running = [
        Restartable(group, "relay", "run_outbox_relay", env=env),
        Restartable(group, "consumers", "run_consumers", "--except", "orders,events", env=env),  # as the Procfile
        Restartable(group, "consumers", "run_consumers", "orders", "events", env=env),
    ]
    seed_catalog(catalog=CATALOG)
    first = cluster.node(1)
    # Two relay pipelines and two consumer processes, each with its own connection.
    wait_until(
        lambda: sum(ports.count(first.port) for ports in connected_ports(group)) >= 4,
        timeout=60,
        message="every process connected to node 1",
    )
    load = OrderLoad(rng, tokens=["tok_visa"], rare_share=0)  # every order can and must confirm
    started = time.monotonic()
    injections = []

    phases: list[tuple[str, int]] = [("before any fault", 0)]  # (phase, orders placed before it began)

    def injected(what: str) -> None:
        injections.append(Injection(time.monotonic() - started, what))
        phases.append((what, len(load.orders)))

    while len(load.orders) < kill_after:
        load.place()
    for index in kill_in_turn:
        node = cluster.node(index)
        leaders = sorted(q["name"] for q in cluster.queues(_vhost(group)) if q.get("leader") == node.name)
        cluster.kill(index)
        injected(f"SIGKILL {node.name}, leader of {len(leaders)} queue(s): {', '.join(leaders) or '-'}")
        _place_for(load, down_for, orders, pace)
        cluster.restart(index)
        injected(f"{node.name} started again after {down_for:g}s down")
    if freeze_for:
        moved_to = connected_ports(group)[0][-1]  # the relay's latest connection
        frozen = next(n for n in cluster.nodes if n.port == moved_to)
        cluster.freeze(frozen.index)
        injected(f"SIGSTOP {frozen.name} (the relay's node) for {freeze_for:g}s; heartbeat {HEARTBEAT}s")
        _place_for(load, freeze_for, orders, pace)
        cluster.thaw(frozen.index)
        injected(f"SIGCONT {frozen.name}")
    while len(load.orders) < orders:
        load.place()
        time.sleep(pace)
    outcome = Outcome(injections, load, exit_codes=_settle(group, running, load, quiet))
    order_ids = list(load.orders)  # in the order placed
    ends = [start for _, start in phases[1:]] + [len(order_ids)]
    outcome.phases = [(what, order_ids[start:end]) for (what, start), end in zip(phases, ends, strict=True)]
    return outcome


def saga_durations(outcome: Outcome | None = None) -> list[str]:
    """How long the sagas took (checkout to their last change), in all and per phase of the run
    (orders placed after each fault): the pause a node loss caused shows as a phase's longest."""
    took = offered("saga_seconds")()

    def line(name: str, ids) -> str:
        seconds = sorted(took[str(i)] for i in ids if str(i) in took)
        if not seconds:
            return f"{name}: no orders"
        return (
            f"{name}: {len(seconds)} sagas, median {seconds[len(seconds) // 2]:.2f}s, "
            f"longest {seconds[-1]:.2f}s, {sum(s > 2 for s in seconds)} over 2 s"
        )

    lines = [line("all", took)]
    for what, ids in getattr(outcome, "phases", []):
        lines.append(line(f"  placed after: {what}", ids))
    return lines


def _vhost(group: ProcessGroup) -> str:
    return group.env["BROKER_URL"].split(";", 1)[0].rsplit("/", 1)[1]
