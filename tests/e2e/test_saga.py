"""Whole sagas through the API, a real relay and real consumers on PostgreSQL and RabbitMQ."""

from decimal import Decimal

import pytest
from django.test import Client
from reliable_messaging.models import OutboxMessage

from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import contract_problems
from faultlib.processes import wait_until
from faultlib.saga import asserted, checkout, ledger, seed_catalog, stock, wait_terminal
from orders.models import Order

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


@pytest.fixture
def running_saga(processes, quiet_broker):
    processes.start("relay", "run_outbox_relay")
    processes.start("consumers", "run_consumers")
    seed_catalog()
    return processes


def event_types(client: Client, order_id: str) -> list[str]:
    """The timeline's events of the participants and shipping (a follower added later has its own tests)."""
    return asserted([e["event_type"] for e in client.get(f"/api/orders/{order_id}/").json()["timeline"]], "shipping")


def test_confirmed_declined_and_out_of_stock_with_refund(running_saga):
    client = Client()
    confirmed = checkout(client, [{"sku": "WIDGET", "quantity": 2}], token="tok_visa")
    declined = checkout(client, [{"sku": "WIDGET", "quantity": 1}], token="tok_chargeDeclined")
    unknown_token = checkout(client, [{"sku": "WIDGET", "quantity": 1}], token="tok_nonsense")
    out_of_stock = checkout(client, [{"sku": "RARE", "quantity": 5}, {"sku": "WIDGET", "quantity": 1}])

    wait_terminal([confirmed["id"], declined["id"], unknown_token["id"], out_of_stock["id"]])
    wait_until(lambda: len(ledger(out_of_stock["id"])) == 2, timeout=30, message="the refund")

    assert Order.objects.get(pk=confirmed["id"]).status == "CONFIRMED"
    assert ledger(confirmed["id"]) == [("charge", Decimal("39.98"))]

    for declined_order in (declined, unknown_token):
        order = Order.objects.get(pk=declined_order["id"])
        assert (order.status, order.failure_reason) == ("FAILED", "payment_declined")
        assert ledger(declined_order["id"]) == []

    order = Order.objects.get(pk=out_of_stock["id"])
    assert (order.status, order.failure_reason) == ("FAILED", "out_of_stock")
    assert ledger(out_of_stock["id"]) == [("charge", Decimal("1269.99")), ("refund", Decimal("1269.99"))]

    assert stock("WIDGET") == 1000 - 2
    assert stock("RARE") == 3

    wait_until(lambda: "shipping.shipment.created" in event_types(client, confirmed["id"]), timeout=30, message="log")
    assert event_types(client, confirmed["id"]) == [
        "orders.order.created",
        "payments.payment.succeeded",
        "inventory.stock.reserved",
        "orders.order.confirmed",
        "shipping.shipment.created",
    ]
    wait_until(lambda: "payments.payment.refunded" in event_types(client, out_of_stock["id"]), timeout=30, message="")
    assert set(event_types(client, out_of_stock["id"])) == {
        "orders.order.created",
        "payments.payment.succeeded",
        "inventory.stock.reservation_failed",
        "orders.order.failed",
        "payments.payment.refunded",
    }

    # Every message these paths published is valid for its event type and version.
    published = list(OutboxMessage.objects.values_list("event_type", "schema_version", "payload"))
    assert contract_problems(published) == []
    assert asserted(sorted({(event_type, version) for event_type, version, _ in published}), "shipping") == [
        ("inventory.product.updated", 1),
        ("inventory.stock.reservation_failed", 1),
        ("inventory.stock.reserved", 1),
        ("orders.order.confirmed", 1),
        ("orders.order.created", 4),
        ("orders.order.failed", 1),
        ("payments.payment.failed", 1),
        ("payments.payment.refunded", 1),
        ("payments.payment.succeeded", 1),
        ("shipping.shipment.created", 1),
    ]


def test_the_storefront_follows_inventory(running_saga):
    client = Client()
    order = checkout(client, [{"sku": "RARE", "quantity": 2}])
    wait_terminal([order["id"]])
    wait_until(
        lambda: {p["sku"]: p["available"] for p in client.get("/api/products/").json()}["RARE"] == 1,
        timeout=30,
        message="the storefront to show the reserved stock",
    )
