"""The return saga (orders/services/returns.py) across the split: each context its own service on
its own database (tests/support/split.py), one broker. Orders hosts the saga; shipping, inventory
and payments obey its commands in their own deployments."""

import uuid
from decimal import Decimal

import pytest

from faultlib.processes import ProcessGroup, free_port, wait_until
from faultlib.web import call, checkout_body, get, post_checkout
from tests.support.split import SplitSystem

INITIAL_STOCK = {"WIDGET": 1000, "GADGET": 500, "GIZMO": 10000, "LIMITED-PRINT": 3}  # seed_catalog's


@pytest.fixture
def split(tmp_path):
    system = SplitSystem.create(tmp_path / "split", uuid.uuid4().hex[:6])
    try:
        system.migrate()
        yield system
    finally:
        system.destroy()


@pytest.fixture
def group(tmp_path):
    (logs := tmp_path / "logs").mkdir()
    processes = ProcessGroup(logs, {})
    yield processes
    processes.stop_all()
    print(processes.logs())


@pytest.mark.needs_contexts("shipping")
def test_a_confirmed_order_is_returned_across_the_split(split, group):
    orders, inventory, shipping = split["orders"], split["inventory"], split["shipping"]
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    orders.start(group, "web", "runserver", f"127.0.0.1:{port}", "--noreload")
    for deployment in split.deployments.values():
        deployment.start(group, "relay", "run_outbox_relay")
        deployment.start(group, "consumers", "run_consumers")
    assert inventory.manage("seed_catalog").returncode == 0
    wait_until(
        lambda: get(api, "/api/products/").status == 200 and len(get(api, "/api/products/").json()) == 4,
        timeout=60,
        message="orders' storefront copy of inventory's catalogue",
    )

    order_id = post_checkout(api, checkout_body("WIDGET", 2)).json()["id"]
    wait_until(
        lambda: shipping.one("SELECT count(*) FROM shipping_shipment WHERE order_id = %s", [order_id]) == 1,
        timeout=90,
        message="the order confirmed and its parcel prepared",
    )
    returned = call(api, "POST", f"/api/orders/{order_id}/return/")
    assert (returned.status, returned.json()["status"]) == (202, "RETURNING")
    wait_until(
        lambda: get(api, f"/api/orders/{order_id}/").json()["status"] == "RETURNED", timeout=120, message="RETURNED"
    )
    split.wait_quiet(timeout=120)

    assert [(kind, amount) for oid, kind, amount in split.ledger() if oid == order_id] == [
        ("charge", Decimal("39.98")),
        ("refund", Decimal("39.98")),
    ]
    assert inventory.rows("SELECT stock FROM inventory_product WHERE sku = 'WIDGET'") == [(1000,)]
    assert shipping.rows("SELECT status FROM shipping_shipment WHERE order_id = %s", [order_id]) == [("CANCELLED",)]
    assert orders.rows("SELECT state FROM messaging_saga WHERE name = 'return' AND key = %s", [order_id]) == [
        ("returned",)
    ]
    report = split.check_invariants(initial_stock=INITIAL_STOCK)
    assert report.violations == [], str(report)
