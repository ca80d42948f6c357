"""Each context as its own service: four deployments on four PostgreSQL databases, one broker.

Every deployment runs from the tree ``make service`` builds for its context, installed from its own
requirements (``tests/support/split.py``). The saga runs across them unchanged,
whichever deployment starts first, and the invariants of the fault tests hold across the three
databases: money by the gateway ledger, stock conserved, shipments following the outcomes, every
order terminal, every message handled at most once by each consumer.
"""

import subprocess
import time
import uuid
from decimal import Decimal

import pytest
from django.apps import apps
from reliable_messaging._declarations import installed, names

from faultlib.processes import ProcessGroup, free_port, wait_until
from faultlib.saga import asserted
from faultlib.web import call, checkout_body, get, post_checkout
from tests.support.split import SplitSystem
from tests.support.waits import wait_for_events

# seed_catalog's demo products, created in the inventory deployment.
INITIAL_STOCK = {"WIDGET": 1000, "GADGET": 500, "GIZMO": 10000, "LIMITED-PRINT": 3}
DJANGO_TABLES = {
    "auth_group",
    "auth_group_permissions",
    "auth_permission",
    "auth_user",
    "auth_user_groups",
    "auth_user_user_permissions",
    "django_admin_log",
    "django_content_type",
    "django_migrations",
    "django_session",
    # The admin's login lockout (django-axes): the admin is served in every deployment.
    "axes_accessattempt",
    "axes_accessattemptexpiration",
    "axes_accessfailurelog",
    "axes_accesslog",
}
# The bus's own tables, in every deployment: those of its models, whichever they are (its own tests say).
MESSAGING_TABLES = {m._meta.db_table for m in apps.get_app_config("messaging").get_models(include_auto_created=True)}
OWN_TABLES = {
    "orders": {"orders_order", "orders_order_line", "orders_storefront_product", "orders_checkout_request"},
    "payments": {"payments_payment"},  # the fake gateway's ledger is on its own database
    "inventory": {"inventory_product", "inventory_reservation"},
    "shipping": {"shipping_shipment"},
}


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    system = SplitSystem.create(tmp_path_factory.mktemp("split"), uuid.uuid4().hex[:6])
    try:
        system.migrate()
        yield system
    finally:
        system.destroy()


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    processes = ProcessGroup(tmp_path_factory.mktemp("split-logs"), {})
    yield processes
    processes.stop_all()
    print(processes.logs())


def test_each_database_holds_only_its_own_contexts_tables(split):
    for context, own in OWN_TABLES.items():
        if context in split.deployments:  # installed (shipping may be removed)
            assert split[context].tables() == own | MESSAGING_TABLES | DJANGO_TABLES, context


def test_a_deployment_has_no_code_of_another_context_and_says_so(split):
    orders, payments, inventory = split["orders"], split["payments"], split["inventory"]
    contexts = names(installed())
    probe = (
        "import importlib.util as u\n"
        "def code(c):\n"
        "    try:\n"
        "        return u.find_spec(c + '.apps') is not None\n"
        "    except ModuleNotFoundError:\n"
        "        return False\n"
        f"print([c for c in {contexts!r} if code(c)])"
    )
    for deployment in split.deployments.values():
        importable = subprocess.run(
            [deployment.python, "-c", probe], cwd=deployment.tree, env=deployment.env, capture_output=True, text=True
        )
        assert importable.stdout.strip() == f"['{deployment.context}']", importable.stderr
        # Of the others, only their declarations: data every deployment reads for the topology.
        for other in set(contexts) - {deployment.context}:
            kept = {p.name for p in (deployment.tree / other).iterdir()}
            assert "context.toml" in kept and kept <= {"context.toml", "schemas"}, (other, kept)

    refused = {
        "gateway_ledger": (orders, "payments"),
        "seed_catalog": (payments, "inventory"),
        "expire_pending_orders": (inventory, "orders"),
    }
    for command, (deployment, owner) in refused.items():
        result = deployment.manage(command)
        assert result.returncode == 2, (command, result.stderr)
        assert f"{command} belongs to the {owner} context" in result.stderr
        assert f"CONTEXTS={deployment.context}" in result.stderr

    elsewhere = orders.manage("run_consumers", "payments", "--once")
    assert elsewhere.returncode == 1
    assert "not hosted by this deployment (CONTEXTS=orders): payments; it hosts: orders, events" in elsewhere.stderr
    assert "hosted here: payments" in payments.manage("run_consumers", "--help").stdout
    assert "hosted here: orders, events" in orders.manage("run_consumers", "--help").stdout
    bogus = orders.manage("check", env={"CONTEXTS": "orders,billing"})
    assert bogus.returncode == 1 and "CONTEXTS names unknown contexts ['billing']" in bogus.stderr


@pytest.mark.needs_contexts("shipping")  # the follower that starts last
def test_the_saga_runs_across_four_deployments_whichever_starts_first(split, group):
    orders, payments, inventory, shipping = split["orders"], split["payments"], split["inventory"], split["shipping"]

    # Given inventory alone: it seeds its catalogue before orders has ever started
    inventory.start(group, "relay", "run_outbox_relay")
    inventory.start(group, "consumers", "run_consumers")
    seeded = inventory.manage("seed_catalog")
    assert seeded.returncode == 0, seeded.stderr
    wait_until(
        lambda: inventory.one("SELECT count(*) FROM messaging_outbox WHERE published_at IS NULL") == 0,
        timeout=30,
        message="inventory's catalogue events published",
    )

    # then orders, which finds the catalogue events waiting in its queue
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    orders.start(group, "web", "runserver", f"127.0.0.1:{port}", "--noreload")
    orders.start(group, "relay", "run_outbox_relay")
    orders.start(group, "consumers", "run_consumers")
    wait_until(
        lambda: len(get(api, "/api/products/").json() if get(api, "/api/products/").status == 200 else []) == 4,
        timeout=60,
        message="orders' storefront copy of inventory's catalogue",
    )

    # When an order is placed before payments has ever started
    first = post_checkout(api, checkout_body("WIDGET", 2))
    assert first.status == 201, first.body
    first_id = first.json()["id"]
    wait_until(
        lambda: (split.queue_depths() or {}).get("payments_queue", 0) == 1,
        timeout=30,
        message="orders.order.created waiting in payments_queue, declared by the other deployments",
    )
    assert get(api, f"/api/orders/{first_id}/").json()["status"] == "PENDING"

    # and payments starts next
    payments.start(group, "relay", "run_outbox_relay")
    payments.start(group, "consumers", "run_consumers")

    # Then the first order completes without shipping, whose news waits in its queue
    wait_until(
        lambda: get(api, f"/api/orders/{first_id}/").json()["status"] == "CONFIRMED",
        timeout=60,
        message="the first order confirmed",
    )
    wait_until(
        lambda: (split.queue_depths() or {}).get("shipping_queue", 0) == 1,
        timeout=30,
        message="orders.order.confirmed waiting in shipping_queue, declared by the other deployments",
    )
    # and once shipping starts, last, the confirmed order's timeline gains its shipment (with it,
    # any other context that follows the saga)
    for follower in [shipping, *split.others("orders", "payments", "inventory", "shipping")]:
        follower.start(group, "relay", "run_outbox_relay")
        follower.start(group, "consumers", "run_consumers")
    wait_until(
        lambda: "shipping.shipment.created" in event_types(api, first_id),
        timeout=60,
        message="shipping.shipment.created in the first order's timeline",
    )
    assert event_types(api, first_id) == [
        "orders.order.created",
        "payments.payment.succeeded",
        "inventory.stock.reserved",
        "orders.order.confirmed",
        "shipping.shipment.created",
    ]

    # and every other path of the saga works across the split
    declined = post_checkout(api, checkout_body("GADGET", 1, token="tok_chargeDeclined")).json()["id"]
    unknown_token = post_checkout(api, checkout_body("GADGET", 1, token="tok_made_up")).json()["id"]
    out_of_stock = post_checkout(api, checkout_body("LIMITED-PRINT", 4)).json()["id"]
    cancelled = post_checkout(api, checkout_body("GIZMO", 5)).json()["id"]
    wait_until(
        lambda: "shipping.shipment.created" in event_types(api, cancelled),
        timeout=60,
        message="the order to cancel confirmed and its shipment prepared",
    )
    assert call(api, "POST", f"/api/orders/{cancelled}/cancel/").status == 202
    # The three answers to the cancellation run in parallel, in three deployments (the refund by the
    # gateway worker): the timeline asserted below waits for all three, then the whole system's quiet.
    answers = ["inventory.stock.released", "payments.payment.refunded", "shipping.shipment.cancelled"]
    wait_for_events(
        lambda: event_types(api, cancelled), answers, timeout=120, what="the cancellation's answers in the timeline"
    )
    split.wait_quiet(timeout=120)

    outcomes = {
        oid: get(api, f"/api/orders/{oid}/").json()
        for oid in (first_id, declined, unknown_token, out_of_stock, cancelled)
    }
    assert {oid: (o["status"], o["failure_reason"]) for oid, o in outcomes.items()} == {
        first_id: ("CONFIRMED", None),
        declined: ("FAILED", "payment_declined"),
        unknown_token: ("FAILED", "payment_declined"),
        out_of_stock: ("FAILED", "out_of_stock"),
        cancelled: ("CANCELLED", None),
    }
    ledger = ledger_of(split)
    assert ledger[first_id] == [("charge", Decimal("39.98"))]
    assert declined not in ledger and unknown_token not in ledger
    assert ledger[out_of_stock] == [("charge", Decimal("1000.00")), ("refund", Decimal("1000.00"))]
    assert ledger[cancelled] == [("charge", Decimal("25.00")), ("refund", Decimal("25.00"))]
    assert inventory.rows("SELECT sku, stock FROM inventory_product ORDER BY sku") == [
        ("GADGET", 500),
        ("GIZMO", 10000),
        ("LIMITED-PRINT", 3),
        ("WIDGET", 998),
    ]
    # The timeline keeps its shape, fed by orders' own outbox and its event log of every context.
    timeline = asserted([(e["event_type"], e) for e in outcomes[cancelled]["timeline"]], "shipping")
    timeline = [e for _, e in timeline]
    assert {tuple(sorted(entry)) for entry in timeline} == {
        ("causation_id", "event_type", "message_id", "occurred_at", "published_at", "source", "state")
    }
    assert [e["event_type"] for e in timeline[:6]] == [
        "orders.order.created",
        "payments.payment.succeeded",
        "inventory.stock.reserved",
        "orders.order.confirmed",
        "shipping.shipment.created",
        "orders.order.cancelled",
    ]
    # The three answers to the cancellation run in parallel, in three deployments: any may come first.
    assert sorted(e["event_type"] for e in timeline[6:]) == answers
    assert shipping.rows("SELECT order_id::text, status FROM shipping_shipment ORDER BY status") == [
        (cancelled, "CANCELLED"),
        (first_id, "PREPARING"),
    ]
    by_id = {e["message_id"]: e for e in timeline}
    succeeded = next(e for e in timeline if e["event_type"] == "payments.payment.succeeded")
    assert by_id[succeeded["causation_id"]]["event_type"] == "orders.order.created"

    # And the saga deadline: an order whose payment does not come fails and is compensated
    payments_consumers = [p for name, p, _ in group.procs if name == "payments-consumers"]
    for proc in payments_consumers:
        assert group.stop(proc) == 0
    late = post_checkout(api, checkout_body("WIDGET", 1)).json()["id"]
    time.sleep(1.5)  # time is the subject: the order is now older than the SAGA_TIMEOUT of 1 s below
    expired = orders.manage("expire_pending_orders", env={"SAGA_TIMEOUT": "1"})
    assert expired.returncode == 0 and expired.stdout.strip() == "1 order(s) failed for timeout", expired.stderr
    payments.start(group, "consumers", "run_consumers")
    split.wait_quiet(timeout=120)
    assert get(api, f"/api/orders/{late}/").json()["failure_reason"] == "timeout"
    assert ledger_of(split).get(late, []) in ([], [("charge", Decimal("19.99")), ("refund", Decimal("19.99"))])

    report = split.check_invariants(initial_stock=INITIAL_STOCK)
    assert report.violations == [], str(report)


def test_a_payments_consumer_killed_before_its_commit_charges_once_across_the_split(split, group, tmp_path):
    orders, payments = split["orders"], split["payments"]
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    orders.start(group, "web-2", "runserver", f"127.0.0.1:{port}", "--noreload")
    wait_until(lambda: get(api, "/healthz").status == 200, timeout=30, message="orders' web process")
    for name, proc, _ in list(group.procs):
        if name == "payments-consumers" and proc.poll() is None:
            assert group.stop(proc) == 0

    # Given payments' consumer stopped before committing the charge in flight (not made yet)
    marker = tmp_path / "payments.pid"
    doomed = payments.start(
        group,
        "consumers",
        "run_consumers",
        env={"FAULT_POINT": "consumer.payments.before_commit", "FAULT_MARKER": str(marker), "CONSUMER_PREFETCH": "1"},
    )
    order_id = post_checkout(api, checkout_body("GADGET", 2)).json()["id"]
    wait_until(marker.exists, timeout=30, message="payments to stop before its commit")
    assert order_id not in ledger_of(split)
    assert payments.one("SELECT count(*) FROM payments_payment WHERE order_id = %s", [order_id]) == 0

    # When it is SIGKILLed there and a new consumer takes the redelivery
    group.kill(doomed)
    payments.start(group, "consumers", "run_consumers")
    split.wait_quiet(timeout=120)

    # Then the gateway worker made the one charge, and the order is confirmed on it
    assert get(api, f"/api/orders/{order_id}/").json()["status"] == "CONFIRMED"
    assert ledger_of(split)[order_id] == [("charge", Decimal("99.00"))]
    report = split.check_invariants(initial_stock=INITIAL_STOCK)
    assert report.violations == [], str(report)


def event_types(api: str, order_id: str) -> list[str]:
    """The timeline's events of the participants and shipping (a follower added later has its own tests)."""
    return asserted([e["event_type"] for e in get(api, f"/api/orders/{order_id}/").json()["timeline"]], "shipping")


def ledger_of(split: SplitSystem) -> dict[str, list[tuple[str, Decimal]]]:
    moved: dict[str, list] = {}
    for order_id, kind, amount in split.ledger():
        moved.setdefault(order_id, []).append((kind, amount))
    return moved
