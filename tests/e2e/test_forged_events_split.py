"""Issue 26, table 6, across four deployments that each connect as a broker user of their own
(BROKER_PRODUCERS, ``manage.py broker_permissions --apply``): every forged event is refused by
RabbitMQ when a context's user publishes another context's routing key, and dead-lettered as
``unauthenticated_producer`` by every consumer it reaches when a user that owns no context
publishes it; no charge, reservation, order state, shipment or price moves, and a genuine order
still confirms with exactly one charge."""

import json
import os
import uuid
from decimal import Decimal

import amqp
import pytest
from reliable_messaging._declarations import installed
from reliable_messaging._topology import subscribers_of

from faultlib.faults import rabbitmqctl
from faultlib.processes import ProcessGroup, free_port, wait_until
from faultlib.web import checkout_body, get, post_checkout
from tests.support.split import SplitSystem, consumer_host
from tests.support.waits import read_until

PASSWORD = "forgery-test"
CONTEXTS = [d.name for d in installed()]
NO_SUCH_ORDER = str(uuid.uuid4())


def forged_events(real_order: str) -> list[tuple[str, dict]]:
    """Table 6: schema-valid events no honest producer sent."""
    lines = [{"sku": "WIDGET", "quantity": 1, "unit_price": "19.99"}]
    created = {"order_id": NO_SUCH_ORDER, "customer_id": "mallory", "items": lines, "payment_token": "tok_visa"}
    return [
        ("orders.order.created", {**created, "total": "19.99", "currency": "USD"}),
        ("payments.payment.succeeded", {"order_id": NO_SUCH_ORDER, "amount": "19.99", "items": lines}),
        ("inventory.stock.reserved", {"order_id": real_order, "items": lines}),
        ("orders.order.created", {**created, "total": "-500.00", "currency": "USD"}),
        ("orders.order.created", {**created, "total": "19.99", "currency": "EUR"}),
        ("orders.order.confirmed", {"order_id": NO_SUCH_ORDER}),
        (
            "inventory.product.updated",
            {"sku": "WIDGET", "name": "Widget", "price": "-5.00", "available": 5, "version": 10**15},
        ),
    ]


def publish_as(user: str, vhost: str, event_type: str, payload: dict) -> str:
    message_id = str(uuid.uuid4())
    message = amqp.Message(
        json.dumps(payload).encode(),
        application_headers={"event_type": event_type, "schema_version": 1},
        message_id=message_id,
        user_id=user,
        delivery_mode=2,
        content_type="application/json",
    )
    with amqp.Connection("127.0.0.1:5672", userid=user, password=PASSWORD, virtual_host=vhost) as conn:
        conn.channel().basic_publish_confirm(message, exchange="ecommerce_events", routing_key=event_type)
    return message_id


@pytest.fixture
def split(tmp_path):
    run = uuid.uuid4().hex[:6]
    users = {context: f"{os.environ['TEST_BROKER_VHOST']}_{run}_{context}" for context in [*CONTEXTS, "outsider"]}
    for user in users.values():
        rabbitmqctl("add_user", user, PASSWORD)
    producers = ",".join(f"{c}={users[c]}" for c in CONTEXTS)
    vhost = f"{os.environ['TEST_BROKER_VHOST']}_split_{run}"
    own = {
        c: {"BROKER_URL": f"amqp://{users[c]}:{PASSWORD}@127.0.0.1:5672/{vhost}", "BROKER_PRODUCERS": producers}
        for c in CONTEXTS
    }
    system = SplitSystem.create(tmp_path, run, extra_env=own)
    try:
        system.migrate()
        applied = system["orders"].manage(
            "broker_permissions",
            "--apply",
            "--admin-url",
            f"amqp://guest:guest@127.0.0.1:5672/{vhost}",
            env=own["orders"],
        )
        assert applied.returncode == 0, applied.stderr
        # an outsider: anyone who may publish anywhere on the vhost, and owns no context
        rabbitmqctl("set_permissions", "-p", vhost, users["outsider"], ".*", ".*", ".*")
        yield system, users, vhost
    finally:
        system.destroy()
        for user in users.values():
            rabbitmqctl("delete_user", user, check=False)


def test_forged_events_are_refused_by_the_broker_or_dead_lettered_and_move_nothing(split, tmp_path):
    system, users, vhost = split
    group = ProcessGroup(tmp_path, {})
    try:
        port = free_port()
        api = f"http://127.0.0.1:{port}"
        for deployment in system.deployments.values():
            deployment.start(group, "relay", "run_outbox_relay")
            deployment.start(group, "consumers", "run_consumers")
        system["orders"].start(group, "web", "runserver", f"127.0.0.1:{port}", "--noreload")
        assert system["inventory"].manage("seed_catalog").returncode == 0
        wait_until(lambda: len(products(api)) == 4, timeout=60, message="the storefront copy of the catalogue")
        real = post_checkout(api, checkout_body("WIDGET", 1, token="tok_chargeDeclined")).json()["id"]
        wait_until(lambda: status(api, real) == "FAILED", timeout=60, message="the declined order failed")
        # and its compensation, which inventory's deployment makes on its own (orders.order.failed):
        # the tombstone asserted below
        tombstone = read_until(lambda: reservations(system), bool, timeout=60, what="the declined order's tombstone")
        assert tombstone == [(real, "cancelled")]

        # a context's own user may publish only its own routing keys: RabbitMQ refuses the rest
        for event_type, payload in forged_events(real):
            if event_type.startswith("shipping."):
                continue
            with pytest.raises(amqp.exceptions.AccessRefused, match=f"access to topic '{event_type}'"):
                publish_as(users["shipping"], vhost, event_type, payload)
        # a user that owns no context gets through the broker; every consumer refuses it
        expected = set()
        for event_type, payload in forged_events(real):
            message_id = publish_as(users["outsider"], vhost, event_type, payload)
            expected |= {(consumer_host(c), c, message_id) for c in subscribers_of(event_type)}
        wait_until(lambda: dead_letters(system) >= expected, timeout=60, message=f"{len(expected)} dead letters")

        assert dead_letters(system) == expected
        assert {r[0] for c in CONTEXTS for r in system[c].rows("SELECT reason FROM messaging_dead_letter")} == {
            "unauthenticated_producer"
        }
        # and nothing moved: no charge, no shipment, the declined order still FAILED, prices as seeded
        assert ledger(system) == []
        assert system["shipping"].one("SELECT count(*) FROM shipping_shipment") == 0
        assert status(api, real) == "FAILED"
        assert {p["sku"]: p["price"] for p in products(api)}["WIDGET"] == "19.99"
        # the declined order's tombstone only: nothing reserved
        assert reservations(system) == [(real, "cancelled")]
        assert system["inventory"].one("SELECT stock FROM inventory_product WHERE sku = 'WIDGET'") == 1000

        # a genuine order still confirms, charged once
        genuine = post_checkout(api, checkout_body("WIDGET", 2)).json()["id"]
        wait_until(lambda: status(api, genuine) == "CONFIRMED", timeout=60, message="the genuine order confirmed")
        assert ledger(system) == [(genuine, "charge", Decimal("39.98"))]
        assert system["inventory"].one("SELECT stock FROM inventory_product WHERE sku = 'WIDGET'") == 1000 - 2
    finally:
        group.stop_all()
        print(group.logs())


def products(api: str) -> list[dict]:
    reply = get(api, "/api/products/")
    return reply.json() if reply.status == 200 else []


def status(api: str, order_id: str) -> str:
    return get(api, f"/api/orders/{order_id}/").json()["status"]


def reservations(system: SplitSystem) -> list[tuple[str, str]]:
    return system["inventory"].rows("SELECT order_id::text, status FROM inventory_reservation ORDER BY order_id")


def dead_letters(system: SplitSystem) -> set[tuple[str, str, str]]:
    return {
        (context, consumer, message_id)
        for context in CONTEXTS
        for consumer, message_id in system[context].rows("SELECT consumer, message_id FROM messaging_dead_letter")
    }


def ledger(system: SplitSystem) -> list[tuple[str, str, Decimal]]:
    printed = system.gateway.manage("gateway_ledger")  # the fake gateway's command, in this checkout
    assert printed.returncode == 0, printed.stderr
    lines = [json.loads(line) for line in printed.stdout.splitlines() if line.strip()]
    return [(line["order_id"], line["kind"], Decimal(line["amount"])) for line in lines]
