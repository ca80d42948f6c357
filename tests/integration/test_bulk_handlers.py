"""The contexts' run handlers in a batch, on PostgreSQL: each run leaves what its members would
have left as runs of one, one after another (how the bus hands a batch's runs to them: the bus's
own tests, test_bulk.py)."""

import dataclasses
import json
import uuid
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from reliable_messaging._dispatch import Delivery, Outcome, decide_batch
from reliable_messaging.models import InboxMessage, OutboxMessage

from inventory.models import Product, Reservation
from inventory.services import product_upsert
from orders.models import Order, StorefrontProduct
from orders.services.checkout import Line, order_place
from payments.models import Payment

pytestmark = pytest.mark.django_db(transaction=True)

CREATED = "orders.order.created"


def delivery(
    consumer: str, event_type: str, payload: dict, *, message_id: str | None = None, version: int = 1
) -> Delivery:
    order_id = payload["order_id"]
    return Delivery(
        consumer=consumer,
        body=json.dumps(payload).encode(),
        properties={"message_id": message_id or f"msg-{uuid.uuid4()}", "correlation_id": order_id},
        headers={"event_type": event_type, "schema_version": version, "occurred_at": "2026-01-01T00:00:00+00:00"},
        routing_key=event_type,
    )


def order_ids(count: int) -> list[str]:
    """Fresh order ids in the order a batch takes them (correlation id, then arrival)."""
    return sorted(str(uuid.uuid4()) for _ in range(count))


def caused(event_type: str) -> dict[str, str]:
    """aggregate id -> causation id of each ``event_type`` in the outbox."""
    return dict(OutboxMessage.objects.filter(event_type=event_type).values_list("aggregate_id", "causation_id"))


# --- the contexts' run handlers ----------------------------------------------------------------------
def paid(order_id: str, sku: str, quantity: int) -> dict:
    return {
        "order_id": order_id,
        "amount": "1.00",
        "currency": "USD",
        "charge_id": f"ch_{order_id}",
        "items": [{"sku": sku, "quantity": quantity}],
    }


def test_inventory_reserves_a_batch_in_turn_until_the_stock_runs_out():
    Product.objects.create(sku="BULK", name="Bulk", price=Decimal("1.00"), stock=5)
    a, b, c = order_ids(3)
    batch = [
        delivery("inventory", "payments.payment.succeeded", paid(a, "BULK", 2), message_id="msg-a"),
        delivery("inventory", "payments.payment.succeeded", paid(b, "BULK", 4), message_id="msg-b"),
        delivery("inventory", "payments.payment.succeeded", paid(c, "BULK", 3), message_id="msg-c"),
        # The same order paid twice (another message id): reserved once.
        delivery("inventory", "payments.payment.succeeded", paid(a, "BULK", 2), message_id="msg-a2"),
    ]

    decisions = decide_batch(batch)

    assert [d.outcome for d in decisions] == [Outcome.HANDLED] * 4
    product = Product.objects.get(sku="BULK")
    assert (product.stock, product.version) == (0, 3)  # a took 2, b was short, c took 3
    statuses = dict(Reservation.objects.values_list("order_id", "status"))
    assert statuses == {uuid.UUID(a): "reserved", uuid.UUID(b): "failed", uuid.UUID(c): "reserved"}
    assert caused("inventory.stock.reserved") == {a: "msg-a", c: "msg-c"}
    assert caused("inventory.stock.reservation_failed") == {b: "msg-b"}
    updates = OutboxMessage.objects.filter(event_type="inventory.product.updated").order_by("id")
    assert [(u.payload["available"], u.payload["version"], u.causation_id) for u in updates] == [
        (3, 2, "msg-a"),
        (0, 3, "msg-c"),
    ]


def placed(order_id: str, total: str) -> dict:
    """An orders.order.created v2 payload."""
    money = {"amount": total, "currency": "USD"}
    return {
        "order_id": order_id,
        "customer_id": "c-1",
        "total": money,
        "items": [{"sku": "BULK", "quantity": 1, "unit_price": money}],
        "payment_token": f"tok_visa_{order_id[:8]}",
    }


def test_payments_records_each_charge_of_a_batch_once_under_its_own_cause():
    a, b = order_ids(2)
    orchestrated = str(uuid.uuid4())
    created = {o: placed(o, total) for o, total in ((a, "12.50"), (b, "7.00"), (orchestrated, "1.00"))}
    created[orchestrated]["saga_style"] = "orchestration"
    batch = [
        delivery("payments", CREATED, created[a], message_id="msg-a", version=2),
        delivery("payments", CREATED, created[b], message_id="msg-b", version=2),
        delivery("payments", CREATED, created[orchestrated], message_id="msg-o", version=2),
        delivery("payments", CREATED, created[a], message_id="msg-a2", version=2),  # asked twice: recorded once
    ]

    decisions = decide_batch(batch)

    assert [d.outcome for d in decisions] == [Outcome.HANDLED] * 4
    payments = {str(p.order_id): p for p in Payment.objects.all()}
    assert sorted(payments) == sorted([a, b, orchestrated])
    # the orchestrator charges its own orders later: payments only keeps the token until then
    kept = payments[orchestrated]
    assert (kept.status, kept.token, kept.amount, kept.causes) == (
        "new",
        created[orchestrated]["payment_token"],
        None,
        {},
    )
    for order_id, message_id in ((a, "msg-a"), (b, "msg-b")):
        payment = payments[order_id]
        assert payment.status == Payment.Status.CHARGING
        assert payment.amount == Decimal(created[order_id]["total"]["amount"])
        assert payment.token == created[order_id]["payment_token"]
        assert payment.call_due_at is not None
        assert payment.causes["charge"]["message_id"] == message_id


@pytest.mark.needs_contexts("shipping")
def test_shipping_prepares_one_shipment_per_confirmed_order_of_a_batch():
    from shipping.models import Shipment  # here: a tree without shipping still collects this module

    a, b, cancelled = order_ids(3)
    with transaction.atomic():
        Shipment.objects.create(order_id=cancelled, status=Shipment.Status.CANCELLED)
    confirmed = {o: {"order_id": o, "total": "1.00", "currency": "USD"} for o in (a, b, cancelled)}
    batch = [
        delivery("shipping", "orders.order.confirmed", confirmed[a], message_id="msg-a"),
        delivery("shipping", "orders.order.confirmed", confirmed[b], message_id="msg-b"),
        delivery("shipping", "orders.order.confirmed", confirmed[cancelled], message_id="msg-x"),
        delivery("shipping", "orders.order.confirmed", confirmed[a], message_id="msg-a2"),
    ]

    decisions = decide_batch(batch)

    assert [d.outcome for d in decisions] == [Outcome.HANDLED] * 4
    statuses = {str(o): s for o, s in Shipment.objects.values_list("order_id", "status")}
    assert statuses == {a: "PREPARING", b: "PREPARING", cancelled: "CANCELLED"}
    created = OutboxMessage.objects.filter(event_type="shipping.shipment.created")
    assert sorted((m.payload["order_id"], m.causation_id) for m in created) == [(a, "msg-a"), (b, "msg-b")]


def test_orders_notes_each_payment_and_confirms_each_reserved_order_of_a_batch_in_turn():
    product_upsert(sku="BULK", name="Bulk", price=Decimal("10.00"), stock=50)
    StorefrontProduct.objects.create(sku="BULK", name="Bulk", price=Decimal("10.00"), available=50, version=1)
    first, second, wrong_lines = (
        str(order_place(customer_id="c", lines=[Line("BULK", 2)], payment_token="tok_visa").id) for _ in range(3)
    )
    batch = [  # in a batch, each order's messages come together, in arrival order
        delivery("orders", "payments.payment.succeeded", paid(first, "BULK", 2) | {"amount": "20.00"}),
        delivery("orders", "inventory.stock.reserved", {"order_id": first, "items": [{"sku": "BULK", "quantity": 2}]}),
        delivery("orders", "payments.payment.succeeded", paid(second, "BULK", 2) | {"amount": "20.00"}),
        delivery("orders", "inventory.stock.reserved", {"order_id": second, "items": [{"sku": "BULK", "quantity": 2}]}),
        delivery("orders", "payments.payment.succeeded", paid(wrong_lines, "BULK", 2) | {"amount": "20.00"}),
        delivery(
            "orders", "inventory.stock.reserved", {"order_id": wrong_lines, "items": [{"sku": "BULK", "quantity": 1}]}
        ),
    ]

    decisions = decide_batch(sorted(batch, key=lambda d: d.properties["correlation_id"]))

    assert [d.outcome for d in decisions] == [Outcome.HANDLED] * 6
    orders = {str(o.id): o for o in Order.objects.all()}
    assert {o: (orders[o].status, orders[o].paid_at is not None) for o in orders} == {
        first: (Order.Status.CONFIRMED, True),
        second: (Order.Status.CONFIRMED, True),
        wrong_lines: (Order.Status.PENDING, True),  # a reservation of other lines is ignored
    }
    confirmed = OutboxMessage.objects.filter(event_type="orders.order.confirmed")
    assert sorted(m.aggregate_id for m in confirmed) == sorted([first, second])
    reserved_ids = {
        d.properties["correlation_id"]: d.properties["message_id"]
        for d in batch
        if d.routing_key.startswith("inventory")
    }
    assert {m.aggregate_id: m.causation_id for m in confirmed} == {o: reserved_ids[o] for o in (first, second)}


def product_updated(sku: str, version: int, available: int, *, price: str = "1.00") -> Delivery:
    payload = {"sku": sku, "name": f"{sku} v{version}", "price": price, "available": available, "version": version}
    return Delivery(
        consumer="orders",
        body=json.dumps(payload).encode(),
        properties={"message_id": f"msg-{uuid.uuid4()}", "correlation_id": sku},  # as inventory publishes it
        headers={"event_type": "inventory.product.updated", "schema_version": 1},
        routing_key="inventory.product.updated",
    )


def test_the_storefront_applies_only_each_skus_newest_version_of_a_batch():
    StorefrontProduct.objects.create(sku="A", name="A v1", price=Decimal("1.00"), available=10, version=1)
    StorefrontProduct.objects.create(sku="C", name="C v7", price=Decimal("7.00"), available=70, version=7)
    batch = [  # out of order, a new SKU, and a stale version of C
        product_updated("A", 3, 8),
        product_updated("A", 5, 6, price="5.00"),
        product_updated("A", 4, 7),
        product_updated("B", 2, 20),
        product_updated("C", 1, 1),
    ]

    with CaptureQueriesContext(connection) as queries:
        decisions = decide_batch(batch)

    assert [d.outcome for d in decisions] == [Outcome.HANDLED] * 5
    assert InboxMessage.objects.filter(consumer="orders").count() == 5
    assert {p.sku: (p.name, p.price, p.available, p.version) for p in StorefrontProduct.objects.all()} == {
        "A": ("A v5", Decimal("5.00"), 6, 5),
        "B": ("B v2", Decimal("1.00"), 20, 2),
        "C": ("C v7", Decimal("7.00"), 70, 7),
    }
    # A: one update (v5); B: an update of nothing, a look, an insert; C: an update of nothing, a
    # look. One after another the five would have taken nine statements.
    storefront = [q["sql"] for q in queries.captured_queries if "orders_storefront_product" in q["sql"]]
    assert len(storefront) == 6


@pytest.mark.parametrize(
    ("unstorable", "why"),
    [
        ({"name": "x" * 201}, "name of 201 characters"),
        ({"price": "10000000000.00"}, "price 10000000000.00"),
        ({"available": 2**31}, "available 2147483648"),
    ],
)
def test_an_older_update_the_storefront_cannot_hold_is_dead_lettered_in_a_run_as_alone(unstorable, why):
    StorefrontProduct.objects.create(sku="A", name="A v1", price=Decimal("1.00"), available=10, version=1)
    bad = product_updated("A", 2, 9)
    payload = json.loads(bad.body) | unstorable
    bad = dataclasses.replace(bad, body=json.dumps(payload).encode())
    batch = [bad, product_updated("A", 3, 8)]  # v3 supersedes v2: in bulk, v2 would never be written

    decisions = decide_batch(batch)

    assert [(d.outcome, d.reason) for d in decisions] == [
        (Outcome.DEAD_LETTER, "invalid_payload"),
        (Outcome.HANDLED, ""),
    ]
    assert why in decisions[0].error
    assert StorefrontProduct.objects.values_list("name", "available", "version").get() == ("A v3", 8, 3)
