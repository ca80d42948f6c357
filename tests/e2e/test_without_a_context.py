"""A context is removable: the tree without ``shipping/`` and without its line in
``INSTALLED_CONTEXTS`` is a working shop. It migrates, runs the Procfile's processes on its own
PostgreSQL database and RabbitMQ vhost, and every saga path ends as before, with no trace of
shipping: no table, no queue, no event.
"""

import os
import shutil
import uuid
from decimal import Decimal

import psycopg
import pytest

from faultlib.faults import rabbitmqctl
from faultlib.processes import BASE_DIR, ProcessGroup, free_port, procfile_commands, wait_until
from faultlib.web import call, checkout_body, get, post_checkout
from tests.support.split import CACHES, NOT_SHIPPED, Deployment, admin_url, database_url
from tests.support.waits import wait_for_events

INSTALLED_LINE = '    "shipping",\n'


@pytest.fixture
def shop_without_shipping(tmp_path):
    run_id = uuid.uuid4().hex[:6]
    vhost = f"{os.environ['TEST_BROKER_VHOST']}_noship_{run_id}"
    database = f"{os.environ.get('TEST_DATABASE_NAME') or 'test'}_noship_{run_id}"[:63]
    tree = tmp_path / "shop"
    shutil.copytree(
        BASE_DIR,
        tree,
        ignore=lambda d, names: {n for n in names if n in CACHES or (d == str(BASE_DIR) and n in NOT_SHIPPED)},
    )
    shutil.rmtree(tree / "shipping")
    settings_file = tree / "config" / "settings.py"
    text = settings_file.read_text()
    assert text.count(INSTALLED_LINE) == 1
    settings_file.write_text(text.replace(INSTALLED_LINE, ""))

    rabbitmqctl("add_vhost", vhost)
    rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    with psycopg.connect(admin_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    env = {
        **{k: v for k, v in os.environ.items() if k not in {"TEST_DATABASE_NAME", "PYTHONPATH", "CONTEXTS"}},
        "DATABASE_URL": database_url(database),
        "GATEWAY_DATABASE_URL": database_url(database),
        "BROKER_URL": f"amqp://guest:guest@127.0.0.1:5672/{vhost}",
        "DEBUG": "1",
        "RELAY_POLL_INTERVAL": "0.2",
        "PYTHONUNBUFFERED": "1",
        "VAR_DIR": str(tmp_path / "var"),
    }
    group = ProcessGroup(tmp_path, {})
    try:
        yield Deployment("shop", tree, database, env), group, vhost
    finally:
        group.stop_all()
        print(group.logs())
        rabbitmqctl("delete_vhost", vhost, check=False)
        with psycopg.connect(admin_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def test_the_shop_without_shipping_migrates_and_runs_every_saga_path(shop_without_shipping):
    shop, group, vhost = shop_without_shipping
    for args in (["check"], ["migrate", "--noinput", "-v0"], ["migrate", "--database", "gateway", "--noinput", "-v0"]):
        result = shop.manage(*args)
        assert result.returncode == 0, result.stderr[-3000:]
    assert not any(table.startswith("shipping_") for table in shop.tables())
    assert shop.manage("seed_catalog").returncode == 0

    port = free_port()
    api = f"http://127.0.0.1:{port}"
    shop.start(group, "web", "runserver", f"127.0.0.1:{port}", "--noreload")
    for name, args in procfile_commands(shop.tree / "Procfile").items():
        shop.start(group, name, *args)
    wait_until(
        lambda: get(api, "/api/products/").status == 200 and len(get(api, "/api/products/").json()) == 4,
        timeout=60,
        message="the storefront",
    )

    confirmed = post_checkout(api, checkout_body("WIDGET", 2)).json()["id"]
    declined = post_checkout(api, checkout_body("GADGET", 1, token="tok_chargeDeclined")).json()["id"]
    out_of_stock = post_checkout(api, checkout_body("LIMITED-PRINT", 4)).json()["id"]
    cancelled = post_checkout(api, checkout_body("GIZMO", 5)).json()["id"]

    def status(order_id: str) -> str:
        return get(api, f"/api/orders/{order_id}/").json()["status"]

    wait_until(lambda: status(cancelled) == "CONFIRMED", timeout=60, message="the order to cancel confirmed")
    assert call(api, "POST", f"/api/orders/{cancelled}/cancel/").status == 202

    def event_types(order_id: str) -> list[str]:
        return [e["event_type"] for e in get(api, f"/api/orders/{order_id}/").json()["timeline"]]

    # Each saga (and each of its compensations: the refund is the gateway worker's) ends on its own:
    # wait for every event asserted below, and for the declined order to leave PENDING.
    started = ["orders.order.created", "payments.payment.succeeded"]
    reserved = [*started, "inventory.stock.reserved", "orders.order.confirmed"]
    wait_for_events(lambda: event_types(confirmed), reserved, what="the confirmed order's timeline")
    compensated = [*reserved, "orders.order.cancelled", "inventory.stock.released", "payments.payment.refunded"]
    wait_for_events(lambda: event_types(cancelled), compensated, what="the cancelled order's compensations")
    refunded = [*started, "inventory.stock.reservation_failed", "orders.order.failed", "payments.payment.refunded"]
    wait_for_events(lambda: event_types(out_of_stock), refunded, what="the out-of-stock order's refund")
    wait_until(lambda: status(declined) != "PENDING", timeout=60, message="the declined order to end")
    assert len(event_types(cancelled)) == 7 and len(event_types(out_of_stock)) == 5
    assert {oid: status(oid) for oid in (confirmed, declined, out_of_stock)} == {
        confirmed: "CONFIRMED",
        declined: "FAILED",
        out_of_stock: "FAILED",
    }
    assert event_types(confirmed) == [
        "orders.order.created",
        "payments.payment.succeeded",
        "inventory.stock.reserved",
        "orders.order.confirmed",
    ]
    assert sorted(event_types(cancelled)[5:]) == ["inventory.stock.released", "payments.payment.refunded"]
    ledger = shop.rows(
        "SELECT order_id, kind, amount::text FROM fake_gateway_operation WHERE outcome = 'succeeded' ORDER BY id"
    )
    assert [(o, k, Decimal(a)) for o, k, a in ledger if o == cancelled] == [
        (cancelled, "charge", Decimal("25.00")),
        (cancelled, "refund", Decimal("25.00")),
    ]
    assert shop.one("SELECT count(*) FROM messaging_outbox WHERE event_type LIKE 'shipping.%%'") == 0
    assert shop.one("SELECT count(*) FROM messaging_dead_letter") == 0
    queues = rabbitmqctl("list_queues", "-p", vhost, "name", "--no-table-headers").split()
    assert {"orders_queue", "payments_queue", "inventory_queue", "events_queue"} <= set(queues)
    assert not [q for q in queues if q.startswith("shipping")]
