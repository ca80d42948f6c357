"""The orchestrated saga across five deployments, each its own service on its own database
(tests/support/split.py), the orchestrator one of them: every outcome, exactly, and the
invariants across the databases."""

import uuid
from decimal import Decimal

import pytest

from faultlib.processes import ProcessGroup, free_port, wait_until
from faultlib.saga import asserted
from faultlib.web import checkout_body, get, post_checkout
from tests.support.split import SplitSystem

INITIAL_STOCK = {"WIDGET": 1000, "GADGET": 500, "GIZMO": 10000, "LIMITED-PRINT": 3}


@pytest.fixture
def split(tmp_path_factory):
    orders_env = {"orders": {"SAGA_STYLE": "orchestration"}}
    system = SplitSystem.create(tmp_path_factory.mktemp("split"), uuid.uuid4().hex[:6], extra_env=orders_env)
    try:
        system.migrate()
        yield system
    finally:
        system.destroy()


@pytest.fixture
def group(tmp_path_factory):
    processes = ProcessGroup(tmp_path_factory.mktemp("split-logs"), {})
    yield processes
    processes.stop_all()
    print(processes.logs())


def test_the_orchestrated_saga_runs_across_five_deployments(split, group):
    # one deployment per installed context (a follower added later too): the five of the saga at least
    assert {"inventory", "orchestrator", "orders", "payments", "shipping"} <= set(split.deployments)
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    for deployment in split.deployments.values():
        deployment.start(group, "relay", "run_outbox_relay")
        deployment.start(group, "consumers", "run_consumers")
    split["orders"].start(group, "web", "runserver", f"127.0.0.1:{port}", "--noreload")
    seeded = split["inventory"].manage("seed_catalog")
    assert seeded.returncode == 0, seeded.stderr
    wait_until(
        lambda: len(get(api, "/api/products/").json() if get(api, "/api/products/").status == 200 else []) == 4,
        timeout=60,
        message="orders' storefront copy of inventory's catalogue",
    )

    placed = {
        "confirmed": checkout_body("WIDGET", 2),
        "declined": checkout_body("GADGET", 1, token="tok_chargeDeclined"),
        "out_of_stock": checkout_body("LIMITED-PRINT", 4),
        "refused": checkout_body("GIZMO", 5, ship_to="AQ"),
    }
    ids = {name: post_checkout(api, body).json()["id"] for name, body in placed.items()}
    split.wait_quiet(timeout=120)

    outcomes = {name: get(api, f"/api/orders/{oid}/").json() for name, oid in ids.items()}
    assert {n: (o["status"], o["failure_reason"], o["saga_style"]) for n, o in outcomes.items()} == {
        "confirmed": ("CONFIRMED", None, "orchestration"),
        "declined": ("FAILED", "payment_declined", "orchestration"),
        "out_of_stock": ("FAILED", "out_of_stock", "orchestration"),
        "refused": ("FAILED", "shipping_refused", "orchestration"),
    }
    moved: dict[str, list] = {}
    for order_id, kind, amount in split.ledger():
        moved.setdefault(order_id, []).append((kind, amount))
    assert {name: moved.get(oid, []) for name, oid in ids.items()} == {
        "confirmed": [("charge", Decimal("39.98"))],
        "declined": [],
        "out_of_stock": [],
        "refused": [("charge", Decimal("25.00")), ("refund", Decimal("25.00"))],
    }
    assert split["inventory"].rows("SELECT sku, stock FROM inventory_product ORDER BY sku") == [
        ("GADGET", 500),
        ("GIZMO", 10000),
        ("LIMITED-PRINT", 3),
        ("WIDGET", 998),
    ]
    sagas = dict(split["orchestrator"].rows("SELECT key, state FROM messaging_saga WHERE name = 'order'"))
    assert {name: sagas[oid] for name, oid in ids.items()} == {
        "confirmed": "completed",
        "declined": "failed",
        "out_of_stock": "failed",
        "refused": "failed",
    }
    # orders' event log sees every context's events and the orchestrator's commands
    assert asserted([e["event_type"] for e in outcomes["refused"]["timeline"]], "shipping") == [
        "orders.order.created",
        "orchestrator.stock.reserve",
        "inventory.stock.reserved",
        "orchestrator.payment.charge",
        "payments.payment.succeeded",
        "orchestrator.shipment.create",
        "shipping.shipment.refused",
        "orchestrator.payment.refund",
        "payments.payment.refunded",
        "orchestrator.stock.release",
        "inventory.stock.released",
        "orchestrator.order.fail",
        "orders.order.failed",
    ]
    report = split.check_invariants(initial_stock=INITIAL_STOCK)
    assert report.violations == [], str(report)
