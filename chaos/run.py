#!/usr/bin/env python3
"""``make chaos``: the long fault-injection run on real PostgreSQL, RabbitMQ and processes.

The same scenarios as the fault tests (``faultlib/scenarios.py``), longer and harder, plus
two that ``make test`` never runs: a full broker restart (``rabbitmqctl stop_app`` /
``start_app``, which disturbs every vhost of the broker) and every fault at once. ``cluster``
runs on a three-node RabbitMQ cluster of its own (``faultlib/cluster.py``), ``postgres`` on a
three-member PostgreSQL cluster of its own (``faultlib/postgres.py``). Each scenario
runs on a fresh database and prints what it injected and every invariant it checked; the run
exits 1 if any scenario failed or broke an invariant.

Run it through ``scripts/with_test_services.py`` (``make chaos`` does), which gives it its own
vhost and test database name. Options: ``--seed N`` to replay a run's random choices,
``--only a,b`` to run some scenarios, ``--scale F`` to multiply every count (0.3 for a quick look),
``--gateway-latency MS`` for the fake gateway's median answer time (50: a real gateway's pace,
with its lognormal tail, that keeps the run's time bounded). ``SAGA_STYLE=orchestration`` in the
environment runs every order as the orchestrated saga (the orchestrator installed, its consumer
killed and paused like the others).
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BASE_DIR))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# This process drives the run and prints its own report; the processes it starts log in full.
PROCESS_LOG_LEVEL = os.environ.get("LOG_LEVEL", "INFO")
os.environ["LOG_LEVEL"] = "CRITICAL"

import django  # noqa: E402 - the fault library reads the models, so Django is set up first

django.setup()

from django.conf import settings as django_settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402
from django.test.utils import setup_databases, setup_test_environment, teardown_databases  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from faultlib import scenarios as s  # noqa: E402
from faultlib.cluster import node_loss, observed_on, own_cluster, saga_durations  # noqa: E402
from faultlib.faults import with_application_name  # noqa: E402
from faultlib.hostile import hostile  # noqa: E402
from faultlib.invariants import broker_queue_depths, check_invariants  # noqa: E402
from faultlib.load import INITIAL_STOCK  # noqa: E402
from faultlib.postgres import on_the_cluster, outage_lines, own_pg_cluster, primary_loss  # noqa: E402
from faultlib.processes import ProcessGroup, database_url, process_environment  # noqa: E402
from faultlib.scenarios import Outcome  # noqa: E402
from faultlib.simulation import shuffled_sagas  # noqa: E402

# Payments code run in this process (the shuffled scenario's gateway worker steps) charges the
# in-process stand-in (fake_gateway/in_process.py) on the same ledger, as in the tests; the processes the
# scenarios start reach the fake gateway's HTTP service. Without it, nothing listens at the
# default GATEWAY_URL and every in-process call is refused.
django_settings.GATEWAY_URL = "inprocess:"


@dataclass
class Result:
    name: str
    ok: bool
    seconds: float
    line: str


def scenarios(scale: float) -> dict:
    """name -> (what it does, function(group, rng) -> Outcome or None)."""

    def n(count: int) -> int:
        return max(1, round(count * scale))

    points = s.CONSUMER_POINTS + s.GATEWAY_CALL_POINTS * 2 + ["consumer.payments.before_commit"] * 4
    return {
        "relay_kills": (
            "two relays SIGKILLed at random moments and between the broker's confirm and the commit",
            lambda g, r: s.relay_kills(g, r, random_kills=n(30), confirm_kills=n(10), max_orders=n(1500)),
        ),
        "consumer_kills": (
            "two consumer processes and the gateway worker SIGKILLed at random, inside each handler, "
            "between commit and ack, and before, during and after a gateway call",
            lambda g, r: s.consumer_kills(
                g,
                r,
                random_kills=n(24),
                points=points[: max(1, round(len(points) * min(scale, 1)))],
                max_orders=n(1500),
            ),
        ),
        "batch_kills": (
            "payments and inventory consumers SIGKILLed inside a batch of their backlog: between two handlers, "
            "and before the batch's commit",
            lambda g, r: s.batch_kills(g, r, rounds=max(2, n(12)), orders_per_round=20),
        ),
        "connection_cuts": (
            "every broker connection of the vhost cut, every database backend of the processes terminated",
            lambda g, r: s.connection_cuts(g, r, broker_cuts=n(12), database_cuts=n(12), max_orders=n(1500)),
        ),
        "broker_restart": (
            "the whole broker stopped and started mid-load (stop_app / start_app; every vhost)",
            lambda g, r: s.broker_restart(g, r, restarts=1, max_orders=n(1500)),
        ),
        "poison": (
            "every kind of poison message, five of each, among valid orders",
            lambda g, r: s.poison(g, r, copies=n(5), max_orders=n(1500)),
        ),
        "hostile": (
            "every kind of hostile message (absurd headers, deep bodies, forged x-death, year 10000, undecodable "
            "properties, a reused message id), three of each, among 300 genuine orders on the Procfile's consumers",
            lambda g, r: hostile(g, r, copies=n(3), max_orders=n(300)),
        ),
        "hostile_gateway": (
            "the gateway worker behind a gateway that lies: every kind of mangled answer (malformed, oversized, "
            "trickling, redirected, pending, about another charge) on charges and refunds, among honest orders",
            lambda g, r: s.hostile_gateway(g, r, max_orders=n(300)),
        ),
        "return_kills": (
            "confirmed orders returned (orders' return saga) while two consumer processes and the gateway worker "
            "are SIGKILLed at random, before each return step's commit and around the refund's gateway call",
            lambda g, r: s.return_kills(g, r, random_kills=n(12), points=s.RETURN_POINTS, orders=n(300)),
        ),
        "races": (
            "cancellations at random moments, consumers down past a 2 s saga deadline",
            lambda g, r: s.races(g, r, pauses=n(10), saga_timeout=2.0, cancel_share=0.3, max_orders=n(1500)),
        ),
        "shuffled": (
            "hypothesis: sagas' deliveries shuffled and duplicated, with a cancellation and the deadline "
            "at any step, through the real dispatch",
            lambda g, r: shuffled(n(300), r),
        ),
        "cluster": (
            "a three-node RabbitMQ cluster of its own: 300 orders while each node is SIGKILLed in turn (node 1, "
            "which every process is connected to, first; so every queue's leader dies once) and started again "
            "15 s later, then the relay's node frozen (SIGSTOP) past the heartbeat and resumed",
            lambda g, r: on_a_cluster(
                g, r, orders=n(300), kill_after=n(30), down_for=15, kill_in_turn=(1, 2, 3), freeze_for=15, pace=0.25
            ),
        ),
        "postgres": (
            "a three-member PostgreSQL cluster of its own (Patroni, synchronous replication): 300 orders while the "
            "primary is SIGKILLed mid-saga, then the new primary frozen (SIGSTOP) past Patroni's TTL and resumed "
            "(it rejoins as a replica), then the killed member started again (a replica too)",
            lambda g, r: on_a_pg_cluster(g, r, orders=n(300), kill_after=n(60), freeze_for=15),
        ),
        "mixed": (
            "everything at once: kills, fault points, cut connections, poison, cancellations, deadline",
            lambda g, r: s.mixed(g, r, rounds=n(8), max_orders=n(2000)),
        ),
    }


# Run after a scenario's invariants were checked (the cluster scenario's nodes are checked, then stopped).
AFTER_CHECK: list = []


def on_a_cluster(group, rng: random.Random, **scenario):
    """The node-loss scenario on a cluster started for it; the invariants read its vhost, then it stops."""
    import contextlib

    stack = contextlib.ExitStack()
    AFTER_CHECK.append(stack.close)
    cluster, vhost = stack.enter_context(own_cluster())
    stack.enter_context(observed_on(cluster, vhost))
    group.env = {**group.env, "BROKER_URL": cluster.url(vhost)}
    outcome = node_loss(group, rng, cluster, **scenario)
    queues = cluster.queues(vhost)
    members = {(q["type"], len(set(q["members"]))) for q in queues}
    print(f"   {len(queues)} queues on the cluster; (type, members): {sorted(members)}")
    print("   saga durations (checkout to terminal):")
    for line in saga_durations(outcome):
        print(f"      {line}")
    if members != {("quorum", 3)}:
        raise AssertionError(f"every queue must be a quorum queue with a member on each node: {queues}")
    return outcome


def on_a_pg_cluster(group, rng: random.Random, **scenario):
    """The primary-loss scenario on a PostgreSQL cluster started for it; this process's connections
    point at its database until the invariants are checked, then it stops."""
    import contextlib

    stack = contextlib.ExitStack()
    AFTER_CHECK.append(stack.close)
    cluster = stack.enter_context(own_pg_cluster())
    stack.enter_context(on_the_cluster(cluster, group))
    outcome = primary_loss(group, rng, cluster, **scenario)
    print("   the web while no primary accepted writes:")
    for line in outage_lines(outcome):
        print(f"      {line}")
    print("   saga durations (checkout to terminal):")
    for line in saga_durations(outcome):
        print(f"      {line}")
    return outcome


def shuffled(examples: int, rng: random.Random) -> list:
    reports = []

    @seed(rng.randrange(2**32))
    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def property_holds(data):
        reports.append(shuffled_sagas(data))

    property_holds()
    return reports


def process_env(gateway_latency_ms: float) -> dict[str, str]:
    url = with_application_name(database_url())
    return process_environment(
        url, LOG_FORMAT="json", LOG_LEVEL=PROCESS_LOG_LEVEL, FAKE_GATEWAY_LATENCY=f"{gateway_latency_ms:g}"
    )


def reset() -> None:
    """A fresh database and empty queues for the next scenario."""
    call_command("flush", interactive=False, verbosity=0)
    vhost = os.environ["TEST_BROKER_VHOST"]
    for name, count in (broker_queue_depths() or {}).items():
        if count:
            subprocess.run(["rabbitmqctl", "-q", "purge_queue", "-p", vhost, name], check=False, capture_output=True)


def run_one(name: str, what: str, func, rng: random.Random, env: dict) -> Result:
    print(f"\n-- {name}: {what}", flush=True)
    started = time.monotonic()
    reset()
    with tempfile.TemporaryDirectory(prefix=f"chaos-{name}-") as logs:
        group = ProcessGroup(Path(logs), env)
        try:
            outcome = func(group, rng)
        except Exception:  # noqa: BLE001 - a failed scenario is reported, the others still run
            print(f"   FAILED: {traceback.format_exc()}")
            print("   last lines of each process:\n" + group.logs(tail=15))
            while AFTER_CHECK:
                AFTER_CHECK.pop()()
            return Result(name, False, time.monotonic() - started, "scenario failed (see above)")
        finally:
            group.stop_all()
            group.kill_all()
    seconds = time.monotonic() - started
    if not isinstance(outcome, Outcome):  # the property run: every example checked its own invariants
        print(f"   {len(outcome)} examples, each checked on its own orders and SKU:")
        for line in outcome[-1].lines():
            print(f"      {line}")
        print(f"   PASS in {seconds:.1f}s")
        return Result(name, True, seconds, f"{len(outcome)} examples")

    print(f"   injected ({len(outcome.injections)}):")
    for line in outcome.injected():
        print(f"      {line}")
    print(f"   load: {outcome.load.summary()}")
    report = check_invariants(
        initial_stock=INITIAL_STOCK,
        expected_dead_letters=outcome.expected_dead_letters,
        tolerated_dead_letter=outcome.tolerated_dead_letter,
        cancelled=outcome.load.cancelled,
        returned=outcome.load.returned,
    )
    missed = [i.description for i in outcome.injections if not i.ok]
    report.check("every fault injected as planned", missed, f"{len(outcome.injections)} faults")
    report.check(
        "every process recovered by itself and exited 0 on SIGTERM",
        [f"exit codes {outcome.exit_codes}"] if any(outcome.exit_codes) else [],
        f"{len(outcome.exit_codes)} processes",
    )
    while AFTER_CHECK:
        AFTER_CHECK.pop()()
    print("   invariants:")
    for line in report.lines():
        print(f"      {line}")
    ok = not report.violations
    line = f"{len(outcome.injections)} faults, {len(outcome.load.orders)} orders, {len(report.violations)} violations"
    print(f"   {'PASS' if ok else 'FAIL'} in {seconds:.1f}s")
    return Result(name, ok, seconds, line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every count")
    parser.add_argument("--gateway-latency", type=float, default=50.0, help="the fake gateway's median answer, ms")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # progress shows as it happens, also in a log file
    if "TEST_BROKER_VHOST" not in os.environ:
        sys.exit("run it with `make chaos` (scripts/with_test_services.py gives it a vhost and a test database)")

    seed = args.seed if args.seed is not None else random.randrange(1_000_000)
    chosen = scenarios(args.scale)
    names = [n for n in args.only.split(",") if n] or list(chosen)
    unknown = sorted(set(names) - set(chosen))
    if unknown:
        sys.exit(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(chosen)}")

    setup_test_environment()
    databases = setup_databases(verbosity=0, interactive=False, aliases={"default", "gateway"})
    started = time.monotonic()
    results = []
    try:
        env = process_env(args.gateway_latency)
        print(
            f"== make chaos: seed {seed} (--seed {seed} replays it), scale {args.scale}, "
            f"the gateway at {args.gateway_latency:g} ms, saga style {django_settings.SAGA_STYLE}"
        )
        print(f"   vhost {os.environ['TEST_BROKER_VHOST']}, database {connections['default'].settings_dict['NAME']}")
        for name in names:
            what, func = chosen[name]
            results.append(run_one(name, what, func, random.Random(f"{seed}-{name}"), env))
    finally:
        connections.close_all()  # the gateway alias shares the test database
        teardown_databases(databases, verbosity=0)
    total = time.monotonic() - started
    print("\n== summary")
    for r in results:
        print(f"   {r.name:16} {'PASS' if r.ok else 'FAIL'} {r.seconds:7.1f}s  {r.line}")
    failed = [r.name for r in results if not r.ok]
    verdict = f"FAIL ({', '.join(failed)})" if failed else "PASS"
    print(f"== make chaos: {verdict}: {len(results)} scenarios in {total / 60:.1f} min, seed {seed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
