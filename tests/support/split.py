"""One deployment per installed context, each as its own service: the tree ``make service`` builds
(scripts/build_service.py), installed from its own requirements into a virtual environment of its
own, on its own database.

The deployments (one per context of ``INSTALLED_CONTEXTS``) share one RabbitMQ vhost (of their own,
apart from the rest of the suite) and nothing else. A service's tree carries its context's code and,
of the others, their declarations (``context.toml``, schemas) only, so an import of another context
fails there. The fake card gateway payments calls is a development service of this checkout, on a
database of its own.

The invariants of ``faultlib/invariants.py`` are checked here across the databases:
orders' statuses against the fake gateway's ledger, inventory's stock and shipping's
shipments, and every event of every outbox handled by every consumer bound to it, in that
consumer's own database.
"""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from pathlib import Path

import psycopg
from reliable_messaging._declarations import installed
from reliable_messaging._topology import ANY_EVENT, EVENT_LOG_CONSUMER, queue_bindings

from faultlib.faults import rabbitmqctl
from faultlib.invariants import Report, once_per_order, wait_quiet
from faultlib.processes import BASE_DIR, GATEWAY_COMMAND, ProcessGroup, free_port
from scripts.build_service import build

# A copy of the whole project (the monolith, less a context: tests/e2e/test_without_a_context.py) leaves
# out development tooling and the bus's source (packages/): it runs the package installed in .venv.
NOT_SHIPPED = {
    *(".git", ".venv", "var", "tests", "faultlib", "bench", "chaos", "docs", "deploy", "scripts", "node_modules"),
    "packages",
}
CACHES = {"__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}
FAST_RETRIES = {"CONSUMER_RETRY_DELAYS": "0.2,0.5,1", "CONSUMER_MAX_ATTEMPTS": "5"}
UV = Path(sys.executable).parent / "uv"


def consumer_host(consumer: str) -> str:
    """The deployment that runs ``consumer``: a context's consumer carries its name; the event
    log runs where a context declares ``event_log``."""
    if consumer == EVENT_LOG_CONSUMER:
        return next(d.name for d in installed() if d.event_log)
    return consumer


@cache
def make_tree(context: str) -> Path:
    """``make service``'s tree of ``context``, with its requirements installed in its own ``.venv``
    (uv: seconds, from its cache). Built once a test session and shared by every split: a deployment
    writes nothing in it (its ``VAR_DIR`` and database are its own)."""
    root = Path(tempfile.mkdtemp(prefix=f"{context}-service-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return install_requirements(build(context, root / "tree"))


def install_requirements(tree: Path) -> Path:
    """``tree`` (a service's, this checkout's or a past release's) with its ``requirements.txt``
    installed in its own ``.venv``, which its deployment runs."""
    python = tree / ".venv" / "bin" / "python"
    subprocess.run([UV, "venv", "--quiet", "--python", sys.executable, tree / ".venv"], check=True)
    done = subprocess.run(
        [UV, "pip", "install", "--quiet", "--python", python, "-r", "requirements.txt"],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return tree


def admin_url() -> str:
    return os.environ["DATABASE_URL"]  # the maintenance database scripts/with_test_services.py gives the run


def database_url(name: str) -> str:
    return admin_url().rsplit("/", 1)[0] + f"/{name}"


@dataclass
class Deployment:
    context: str
    tree: Path
    database: str
    env: dict[str, str]
    # where payments reaches the fake gateway: the checkout's own development service (SplitSystem.gateway)
    gateway: "Deployment | None" = None

    @property
    def url(self) -> str:
        return database_url(self.database)

    @property
    def python(self) -> str:
        """Its own environment's (a service's tree), else this one's (a copy of the project)."""
        own = self.tree / ".venv" / "bin" / "python"
        return str(own) if own.exists() and self.tree != BASE_DIR else sys.executable

    def manage(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120):
        return subprocess.run(
            [self.python, "manage.py", *args],
            cwd=self.tree,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, group: ProcessGroup, name: str, *args: str, env: dict[str, str] | None = None):
        # A whole tree (a copy of this checkout, or a past release's) runs the fake gateway beside
        # payments (fake_gateway/server.py; before it left payments, payments' gateway_server module):
        # its consumers start it from there. A service reaches the checkout's own (SplitSystem.gateway).
        whole = any(
            server.exists()
            for server in (self.tree / "fake_gateway" / "server.py", self.tree / "payments" / "gateway_server.py")
        )
        if whole and "GATEWAY_PORT" not in self.env:
            port = str(free_port())
            self.env.update(GATEWAY_PORT=port, GATEWAY_URL=f"http://127.0.0.1:{port}")
        merged = {**self.env, **(env or {})}
        if whole:
            if args and args[0] == GATEWAY_COMMAND:
                return group.start_gateway(f"{self.context}-{name}", *args, env=merged, cwd=self.tree)
            if args and args[0] == "run_consumers":
                group.ensure_gateway(merged, cwd=self.tree)
                group.ensure_gateway_calls(merged, cwd=self.tree, name=f"{self.context}-gateway-calls")
        elif self.gateway is not None and args and args[0] == "run_consumers":
            group.ensure_gateway(self.gateway.env, cwd=self.gateway.tree)
            group.ensure_gateway_calls(merged, cwd=self.tree, name=f"{self.context}-gateway-calls", python=self.python)
        return group.spawn(f"{self.context}-{name}", [self.python, "manage.py", *args], env=merged, cwd=self.tree)

    def rows(self, sql: str, params=None) -> list[tuple]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    def one(self, sql: str, params=None):
        return self.rows(sql, params)[0][0]

    def tables(self) -> set[str]:
        return {r[0] for r in self.rows("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


@dataclass
class SplitSystem:
    """The deployments and their shared broker vhost."""

    deployments: dict[str, Deployment]
    vhost: str
    # the fake card gateway, run from this checkout on a database of its own (its ledger)
    gateway: Deployment | None = None
    created: list[str] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        root: Path,
        run_id: str,
        *,
        trees: dict[str, Path] | None = None,
        extra_env: dict[str, dict[str, str]] | None = None,
    ) -> "SplitSystem":
        """``trees`` runs some contexts from another tree (a past release's, whole, hosting only
        that context); ``extra_env`` adds settings to some deployments (EVENT_VERSIONS, say)."""
        trees, extra_env = trees or {}, extra_env or {}
        vhost = f"{os.environ['TEST_BROKER_VHOST']}_split_{run_id}"
        rabbitmqctl("add_vhost", vhost)
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        system = cls({}, vhost)
        base = os.environ.get("TEST_DATABASE_NAME") or "test_split"
        gateway_port = str(free_port())  # the fake gateway (started with payments' consumers)
        # A test's own settings module is not a deployment's: each tree's manage.py names its own.
        inherited = {k: v for k, v in os.environ.items() if k not in {"TEST_DATABASE_NAME", "PYTHONPATH"}}
        inherited.pop("DJANGO_SETTINGS_MODULE", None)
        common = {
            **inherited,
            "GATEWAY_PORT": gateway_port,
            "GATEWAY_URL": f"http://127.0.0.1:{gateway_port}",
            "BROKER_URL": f"amqp://guest:guest@127.0.0.1:5672/{vhost}",
            "DEBUG": "1",
            "LOG_FORMAT": "json",
            "RELAY_POLL_INTERVAL": "0.2",
            "PYTHONUNBUFFERED": "1",
            **FAST_RETRIES,
        }
        with psycopg.connect(admin_url(), autocommit=True) as admin:

            def database(name: str) -> str:
                name = f"{base}_{run_id}_{name}"[:63]
                admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
                admin.execute(f'CREATE DATABASE "{name}"')
                system.created.append(name)
                return name

            name = database("gateway")
            url = database_url(name)
            gateway_env = {"CONTEXTS": "payments", "DATABASE_URL": url, "GATEWAY_DATABASE_URL": url}
            gateway_env["VAR_DIR"] = str(root / "var-gateway")
            system.gateway = Deployment("gateway", BASE_DIR, name, {**common, **gateway_env})
            for context in [d.name for d in installed()]:
                name = database(context)
                env = {
                    **common,
                    "CONTEXTS": context,
                    "DATABASE_URL": database_url(name),
                    "VAR_DIR": str(root / f"var-{context}"),
                    **extra_env.get(context, {}),
                }
                tree = trees.get(context) or make_tree(context)
                system.deployments[context] = Deployment(context, tree, name, env, gateway=system.gateway)
        return system

    @classmethod
    @contextmanager
    def migrated(cls, root: Path, **options) -> Iterator["SplitSystem"]:
        """``create`` and ``migrate``, then ``destroy`` whatever happens (a test's fixture)."""
        system = cls.create(root, uuid.uuid4().hex[:6], **options)
        try:
            system.migrate()
            yield system
        finally:
            system.destroy()

    def __getitem__(self, context: str) -> Deployment:
        return self.deployments[context]

    def others(self, *contexts: str) -> list[Deployment]:
        """The deployments of every installed context not named: those a test does not drive by
        hand (a context that follows the saga, added by startcontext, say)."""
        return [d for name, d in self.deployments.items() if name not in contexts]

    def migrate(self) -> None:
        for deployment in self.deployments.values():
            declaration = next(d for d in installed() if d.name == deployment.context)
            for database in ("default", *declaration.databases):
                result = deployment.manage("migrate", "--database", database, "--noinput", "-v0")
                assert result.returncode == 0, f"{deployment.context}: {result.stderr[-3000:]}"

    def destroy(self) -> None:
        rabbitmqctl("delete_vhost", self.vhost, check=False)
        with psycopg.connect(admin_url(), autocommit=True) as admin:
            for name in self.created:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def ledger(self) -> list[tuple[str, str, Decimal]]:
        """The money the fake gateway moved, in order: (order id, kind, amount). Its own database, but
        where payments runs from a past release's whole tree: that ran it inside payments."""
        payments = self["payments"]
        where = self.gateway if (payments.tree / "service_settings.py").exists() else payments
        rows = where.rows(
            "SELECT order_id, kind, amount::text FROM fake_gateway_operation WHERE outcome = 'succeeded' ORDER BY id"
        )
        return [(order_id, kind, Decimal(amount)) for order_id, kind, amount in rows]

    # --- the state of the whole system ----------------------------------------------------------
    def queue_depths(self) -> dict[str, int] | None:
        output = rabbitmqctl("list_queues", "-p", self.vhost, "name", "messages", "--no-table-headers", check=False)
        depths = {}
        for line in output.splitlines():
            name, _, count = line.rpartition("\t")
            if name and count.isdigit():
                depths[name] = int(count)
        return depths or None

    def unhandled(self) -> list[str]:
        """Published events some consumer bound to them has neither handled nor dead-lettered."""
        missing = []
        published = {
            context: d.rows("SELECT event_id::text, event_type FROM messaging_outbox WHERE published_at IS NOT NULL")
            for context, d in self.deployments.items()
        }
        for consumer, keys in queue_bindings().items():
            host = self[consumer_host(consumer)]
            done = {
                r[0]
                for r in host.rows(
                    "SELECT message_id FROM messaging_inbox WHERE consumer = %s "
                    "UNION SELECT message_id FROM messaging_dead_letter WHERE consumer = %s",
                    [consumer, consumer],
                )
            }
            for context, rows in published.items():
                for event_id, event_type in rows:
                    if (ANY_EVENT in keys or event_type in keys) and event_id not in done:
                        missing.append(f"{consumer} never handled {event_type} {event_id} (published by {context})")
        return missing

    def state(self) -> dict:
        depths = self.queue_depths()
        return {
            "unpublished": sum(
                d.one("SELECT count(*) FROM messaging_outbox WHERE published_at IS NULL AND parked_at IS NULL")
                for d in self.deployments.values()
            ),
            "queued": None if depths is None else sum(depths.values()),
            "unhandled": len(self.unhandled()),
            "pending_orders": self["orders"].one(
                "SELECT count(*) FROM orders_order WHERE status IN ('PENDING', 'RETURNING')"
            ),
            "inbox": sum(d.one("SELECT count(*) FROM messaging_inbox") for d in self.deployments.values()),
            "calls_in_flight": self["payments"].one(
                "SELECT count(*) FROM payments_payment WHERE status IN ('charging', 'refunding')"
            )
            if "payments" in self.deployments
            else 0,
        }

    def wait_quiet(self, *, timeout: float, stable_for: float = 2.0, allow_pending_orders: bool = False) -> dict:
        return wait_quiet(
            timeout=timeout,
            stable_for=stable_for,
            allow_pending_orders=allow_pending_orders,
            state_of=self.state,
            interval=0.3,
            what="the split system",
        )

    # --- the invariants, across the databases ---------------------------------------------------
    def check_invariants(self, *, initial_stock: dict[str, int]) -> Report:
        report = Report()
        orders, inventory = self["orders"], self["inventory"]
        statuses = {
            r[0]: (r[1], r[2], Decimal(r[3]))
            for r in orders.rows("SELECT id::text, status, failure_reason, total::text FROM orders_order")
        }

        pending = [f"order {oid} is {s}" for oid, (s, _, _) in statuses.items() if s in ("PENDING", "RETURNING")]
        counted = Counter(s for s, _, _ in statuses.values())
        report.check("every order terminal (orders' database)", pending, f"{len(statuses)} orders: {dict(counted)}")

        moved: dict[str, list[tuple[str, Decimal]]] = defaultdict(list)
        for order_id, kind, amount in self.ledger():
            moved[order_id].append((kind, amount))
        problems = []
        for oid, (status, _, total) in statuses.items():
            ops = moved.get(oid, [])
            if status == "CONFIRMED" and ops != [("charge", total)]:
                problems.append(f"CONFIRMED order {oid} (total {total}) moved {ops}")
            elif status == "RETURNED" and ops != [("charge", total), ("refund", total)]:
                problems.append(f"RETURNED order {oid} (total {total}) moved {ops}")
            elif status in ("FAILED", "CANCELLED") and ops not in ([], [("charge", total), ("refund", total)]):
                problems.append(f"{status} order {oid} (total {total}) moved {ops}")
        problems += [f"money moved for {oid}, which is no order: {moved[oid]}" for oid in set(moved) - set(statuses)]
        report.check(
            "money by the gateway ledger (the fake gateway's database) against the orders' outcomes",
            problems,
            f"{sum(len(v) for v in moved.values())} operations",
        )

        held = dict(
            orders.rows(
                "SELECT l.sku, sum(l.quantity) FROM orders_order_line l JOIN orders_order o ON o.id = l.order_id "
                "WHERE o.status = 'CONFIRMED' GROUP BY l.sku"
            )
        )
        stock = {r[0]: (r[1], r[2]) for r in inventory.rows("SELECT sku, stock, version FROM inventory_product")}
        storefront = {
            r[0]: (r[1], r[2]) for r in orders.rows("SELECT sku, available, version FROM orders_storefront_product")
        }
        problems = [
            f"{sku}: initial {initial} != available {stock.get(sku, (0, 0))[0]} + held {held.get(sku, 0)}"
            for sku, initial in initial_stock.items()
            if stock.get(sku, (0, 0))[0] + held.get(sku, 0) != initial
        ]
        problems += [
            f"{sku}: storefront {storefront.get(sku)} != inventory {v}"
            for sku, v in stock.items()
            if storefront.get(sku) != v
        ]
        report.check("stock conserved (inventory) and the storefront in step (orders)", problems, f"{stock}")

        if "shipping" in self.deployments:  # a follower: checked where it is installed
            from shipping.tests.invariants import shipment_problems  # here: split.py loads without shipping

            shipments = dict(self["shipping"].rows("SELECT order_id::text, status FROM shipping_shipment"))
            # A past release's orders (the rolling upgrade) has no saga_style: each of its orders choreographed.
            styled = orders.one(
                "SELECT count(*) FROM information_schema.columns "
                "WHERE table_name = 'orders_order' AND column_name = 'saga_style'"
            )
            orchestrated = frozenset(
                oid
                for (oid,) in (
                    orders.rows("SELECT id::text FROM orders_order WHERE saga_style = 'orchestration'")
                    if styled
                    else []
                )
            )
            report.check(
                "shipments (shipping's database) follow the orders' outcomes",
                shipment_problems(
                    {oid: s for oid, (s, _, _) in statuses.items()}, shipments, whole=True, orchestrated=orchestrated
                ),
                f"{len(shipments)} shipments",
            )

        problems = []
        for deployment in self.deployments.values():
            for cause, event_type, n in deployment.rows(
                "SELECT causation_id, event_type, count(*) FROM messaging_outbox WHERE causation_id <> '' "
                "GROUP BY causation_id, event_type, aggregate_id HAVING count(*) > 1"
            ):
                problems.append(f"{deployment.context}: {cause} caused {event_type} {n} times")
            for correlation, event_type, n in deployment.rows(
                "SELECT correlation_id, event_type, count(*) FROM messaging_outbox WHERE event_type = ANY(%s) "
                "GROUP BY correlation_id, event_type HAVING count(*) > 1",
                [list(once_per_order())],
            ):
                problems.append(f"{deployment.context}: order {correlation} has {n} x {event_type}")
        report.check("each consumer handled each message at most once (effects in every database)", problems)

        report.check(
            "every published event handled by every consumer bound to it, in its own database", self.unhandled()
        )
        unpublished = [
            f"{d.context}: {n} outbox rows unpublished"
            for d in self.deployments.values()
            if (n := d.one("SELECT count(*) FROM messaging_outbox WHERE published_at IS NULL"))
        ]
        report.check("every outbox drained", unpublished)
        letters = [
            f"{d.context}: dead letter {r}"
            for d in self.deployments.values()
            for r in d.rows("SELECT consumer, message_id, reason FROM messaging_dead_letter")
        ]
        report.check("no dead letter", letters)
        return report
