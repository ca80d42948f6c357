"""A PostgreSQL cluster of a test's own (``scripts/postgres_cluster.py``) and the primary-loss scenario.

The cluster gets member names, ports and a folder no other run uses and is always stopped
(``finally`` and ``atexit``), whatever the test did to its members. While a scenario runs, this
process's own connections (the checkout API it calls, the invariants it reads) point at a
database on the cluster too. Shared by the short fault test and ``make chaos``.
"""

import atexit
import contextlib
import importlib.util
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import environ
from django.db import close_old_connections, connections

from faultlib.faults import Injection, Restartable
from faultlib.load import CATALOG, OrderLoad
from faultlib.ports import free_base
from faultlib.processes import BASE_DIR, ProcessGroup, wait_until
from faultlib.saga import seed_catalog
from faultlib.scenarios import FAST_RETRIES, Outcome, _settle
from faultlib.steps import offered

_spec = importlib.util.spec_from_file_location("postgres_cluster", BASE_DIR / "scripts" / "postgres_cluster.py")
postgres_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(postgres_cluster)
PgCluster = postgres_cluster.Cluster

ALIASES = ("default", "gateway")  # the gateway's ledger shares the database, as on one server
BASES = (13000, 26000)  # member 1's port: members, their REST ports (+3000) and etcd up to 29013
OUTAGE_LIMIT = 60  # seconds: no failover here takes this long (TTL 10 s, plus a frozen member's connect timeout)


@contextlib.contextmanager
def own_pg_cluster() -> Iterator[PgCluster]:
    """A running three-member cluster in a temporary folder, stopped and removed whatever happens."""
    root = Path(tempfile.mkdtemp(prefix="pg-cluster-"))
    cluster = PgCluster(
        f"sagapg{uuid.uuid4().hex[:6]}",
        free_base(random.Random(), *BASES, lambda base: PgCluster("probe", base).ports()),
        root=root,
    )
    atexit.register(cluster.stop)  # a test interrupted by a signal still stops its members
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        atexit.unregister(cluster.stop)


@contextlib.contextmanager
def on_the_cluster(cluster: PgCluster, group: ProcessGroup) -> Iterator[str]:
    """A migrated database of its own on the cluster, for the group's processes and for this process's
    connections meanwhile (no pool: a connection that broke in a failover is closed, not handed back)."""
    name = f"saga_{uuid.uuid4().hex[:10]}"
    cluster.create_database(name)
    url = cluster.url(name)
    group.env = {**group.env, "DATABASE_URL": url, "GATEWAY_DATABASE_URL": url}
    for alias in ALIASES:
        migrated = group.run("migrate", "--database", alias, "--no-input", timeout=180)
        assert migrated.returncode == 0, migrated.stderr
    parsed = environ.Env.db_url_config(url)
    saved = {alias: dict(connections[alias].settings_dict) for alias in ALIASES}
    for alias in ALIASES:
        connections[alias].close()
        options = {k: v for k, v in saved[alias].get("OPTIONS", {}).items() if k != "pool"}
        connections[alias].settings_dict.update(
            {key: parsed[key] for key in ("NAME", "HOST", "PORT", "USER", "PASSWORD")},
            OPTIONS={**options, **parsed["OPTIONS"]},
        )
    try:
        yield url
    finally:
        connections.close_all()
        for alias in ALIASES:
            connections[alias].settings_dict.clear()
            connections[alias].settings_dict.update(saved[alias])


@dataclass
class WebOutage:
    """Checkouts tried while no primary accepted writes: their answers and how long until one was placed."""

    statuses: list[int] = field(default_factory=list)
    without_retry_after: int = 0
    seconds: float = 0.0


def place_through_outage(load: OrderLoad, since: float) -> WebOutage:
    """Try checkouts until one is placed (at most ``OUTAGE_LIMIT`` s after ``since``), as a client that
    honours 503 would; every refusal recorded. Each attempt starts as a request does: connections
    that broke are closed first (the test client does not do it)."""
    outage = WebOutage()
    while time.monotonic() - since < OUTAGE_LIMIT:
        close_old_connections()
        key = str(uuid.uuid4())
        response = load.client.post(
            "/api/checkout/",
            {"customer_id": "cust-failover", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": "tok_visa"},
            content_type="application/json",
            headers={"Idempotency-Key": key},
        )
        outage.statuses.append(response.status_code)
        if response.status_code == 201:
            load.orders[response.json()["id"]] = "tok_visa"
            outage.seconds = time.monotonic() - since
            return outage
        outage.without_retry_after += "Retry-After" not in response.headers
        time.sleep(0.2)
    raise AssertionError(f"no checkout placed within {OUTAGE_LIMIT}s of the fault: answers {outage.statuses}")


def primary_loss(
    group: ProcessGroup,
    rng: random.Random,
    cluster: PgCluster,
    *,
    orders: int,
    kill_after: int,
    freeze_for: float = 0.0,
    quiet: float = 120,
) -> Outcome:
    """The primary SIGKILLed mid-saga (``kill_after`` orders placed, sagas in flight), orders placed
    through the failover; with ``freeze_for``, then the new primary frozen (SIGSTOP) that long, past
    Patroni's TTL, and resumed (it comes back a replica); then the killed member started again (a
    replica too). Every order must end CONFIRMED without a process restarted by hand.
    ``outcome.outages``: per fault, the web's answers until a checkout was placed again."""
    running = [
        Restartable(group, "relay", "run_outbox_relay", env=FAST_RETRIES),
        Restartable(group, "consumers", "run_consumers", "--except", "orders,events", env=FAST_RETRIES),
        Restartable(group, "consumers", "run_consumers", "orders", "events", env=FAST_RETRIES),
    ]
    seed_catalog(catalog=CATALOG)
    load = OrderLoad(rng, tokens=["tok_visa"], rare_share=0)  # every order can and must confirm
    started = time.monotonic()
    injections: list[Injection] = []
    outages: list[tuple[str, WebOutage]] = []
    phases: list[tuple[str, int]] = [("before any fault", 0)]

    def injected(what: str) -> None:
        injections.append(Injection(time.monotonic() - started, what))
        phases.append((what, len(load.orders)))

    # mid-run: some sagas done, the latest still in flight
    while len(load.orders) < kill_after or ("CONFIRMED" not in _statuses(load) and len(load.orders) < orders - 1):
        load.place()
    in_flight = _statuses(load).count("PENDING")
    at, killed_at = time.monotonic(), time.time()
    killed = cluster.kill_primary()
    injected(f"SIGKILL {killed} (primary: Patroni and postmaster) with {in_flight} saga(s) in flight")
    outages.append((f"{killed} killed", place_through_outage(load, at)))
    injections.append(Injection(time.monotonic() - started, f"{cluster.primary()} promoted"))
    if freeze_for:
        # Only the synchronous standby may be promoted (it has every commit): wait until the new
        # primary has named one, or no member could take over from it.
        wait_until(lambda: {"leader", "sync_standby"} <= set(cluster.roles()), timeout=60, message="a sync standby")
        at = time.monotonic()
        frozen = cluster.freeze()
        injected(f"SIGSTOP {frozen} (the new primary) for {freeze_for:g}s, past the {postgres_cluster.TTL}s TTL")
        outages.append((f"{frozen} frozen", place_through_outage(load, at)))
        while time.monotonic() - at < freeze_for:
            load.place()
            time.sleep(0.1)
        cluster.thaw()
        injected(f"SIGCONT {frozen}: it finds another primary and rejoins as a replica")
    cluster.start()  # the killed member back, a replica of the new primary
    injected(f"{killed} started again, a replica: {'; '.join(cluster.status()[1:])}")
    while len(load.orders) < orders:
        close_old_connections()
        load.place()
        time.sleep(0.02)
    close_old_connections()
    outcome = Outcome(injections, load, exit_codes=_settle(group, running, load, quiet))
    order_ids = list(load.orders)
    ends = [start for _, start in phases[1:]] + [len(order_ids)]
    outcome.phases = [(what, order_ids[start:end]) for (what, start), end in zip(phases, ends, strict=True)]
    outcome.in_flight, outcome.killed_at = in_flight, killed_at
    outcome.outages = outages
    return outcome


def _statuses(load: OrderLoad) -> list[str]:
    return offered("order_statuses")(list(load.orders))


def outage_lines(outcome: Outcome) -> list[str]:
    return [
        f"{what}: checkout placed again after {o.seconds:.1f}s; {len(o.statuses) - 1} refused "
        f"({sorted(set(o.statuses[:-1]))}), {o.without_retry_after} without Retry-After"
        for what, o in outcome.outages
    ]
