"""The checkout API, exactly as the contract describes it."""

import json
import uuid
from decimal import Decimal

import pytest
from django.test import Client
from reliable_messaging.models import OutboxMessage

from orders.models import CheckoutRequest, Order, OrderLine, StorefrontProduct

pytestmark = pytest.mark.django_db


@pytest.fixture
def storefront():
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("19.99"), available=10, version=3)
    StorefrontProduct.objects.create(sku="GADGET", name="Gadget", price=Decimal("49.50"), available=0, version=1)


@pytest.fixture
def client():
    return Client()


def body(**overrides):
    data = {"customer_id": "cust-1", "items": [{"sku": "WIDGET", "quantity": 2}], "payment_token": "tok_visa"}
    data.update(overrides)
    return data


def post_checkout(client, data, key="key-1", raw=None):
    headers = {"Idempotency-Key": key} if key is not None else {}
    payload = raw if raw is not None else json.dumps(data)
    return client.post("/api/checkout/", payload, content_type="application/json", headers=headers)


def nothing_written():
    return Order.objects.count() == 0 and OutboxMessage.objects.count() == 0 and CheckoutRequest.objects.count() == 0


def test_products_lists_the_storefront_copy(client, storefront):
    response = client.get("/api/products/")
    assert response.status_code == 200
    assert response.json() == [
        {"sku": "GADGET", "name": "Gadget", "price": "49.50", "available": 0},
        {"sku": "WIDGET", "name": "Widget", "price": "19.99", "available": 10},
    ]


def test_checkout_creates_a_pending_order_and_its_event_in_one_go(client, storefront):
    response = post_checkout(client, body(items=[{"sku": "WIDGET", "quantity": 2}, {"sku": "GADGET", "quantity": 1}]))

    assert response.status_code == 201
    order = response.json()
    assert order["status"] == "PENDING"
    assert order["failure_reason"] is None
    assert order["total"] == "89.48"
    assert order["currency"] == "USD"
    assert order["items"] == [
        {"sku": "WIDGET", "quantity": 2, "unit_price": "19.99"},
        {"sku": "GADGET", "quantity": 1, "unit_price": "49.50"},
    ]
    uuid.UUID(order["id"])
    row = OutboxMessage.objects.get()
    assert row.event_type == "orders.order.created"
    assert row.correlation_id == order["id"]
    assert row.payload["payment_token"]["$encrypted"]["for"] == ["payments"]  # payments alone reads it
    assert row.payload["customer_id"]["$encrypted"]["for"] == []  # under the customer's own key, no reader
    assert row.schema_version == 4
    assert row.payload["total"] == {"amount": "89.48", "currency": "USD"}
    assert [item["unit_price"] for item in row.payload["items"]] == [
        {"amount": "19.99", "currency": "USD"},
        {"amount": "49.50", "currency": "USD"},
    ]
    assert [(e["event_type"], e["message_id"], e["published_at"]) for e in order["timeline"]] == [
        ("orders.order.created", str(row.event_id), None)
    ]


def test_same_key_and_same_body_replays_the_stored_response(client, storefront):
    first = post_checkout(client, body())
    # Same JSON with the keys in another order and other spacing: the same request.
    raw = '{"payment_token":"tok_visa",  "items":[{"quantity":2,"sku":"WIDGET"}],"customer_id":"cust-1"}'
    second = post_checkout(client, None, raw=raw)

    assert second.status_code == 201
    assert second.json() == first.json()
    assert second.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert Order.objects.count() == 1
    assert OutboxMessage.objects.count() == 1


def test_same_key_with_another_body_is_422(client, storefront):
    post_checkout(client, body())
    response = post_checkout(client, body(customer_id="someone-else"))

    assert response.status_code == 422
    assert response.json()["code"] == "idempotency_key_reused"
    assert set(response.json()) == {"code", "detail"}
    assert Order.objects.count() == 1


def test_a_different_key_makes_a_second_order(client, storefront):
    post_checkout(client, body(), key="a")
    post_checkout(client, body(), key="b")
    assert Order.objects.count() == 2


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (body(items=[{"sku": "NOPE", "quantity": 1}]), "items"),
        (body(items=[{"sku": "WIDGET", "quantity": 0}]), "items.0.quantity"),
        (body(items=[{"sku": "WIDGET", "quantity": 1001}]), "items.0.quantity"),
        (body(items=[{"sku": "WIDGET", "quantity": "2"}]), "items.0.quantity"),
        (body(items=[{"sku": "WIDGET", "quantity": 1.5}]), "items.0.quantity"),
        (body(items=[{"sku": "WIDGET"}]), "items.0.quantity"),
        (body(items=[]), "items"),
        (body(items=[{"sku": f"S{i}", "quantity": 1} for i in range(51)]), "items"),
        (body(items=[{"sku": "WIDGET", "quantity": 1}, {"sku": "WIDGET", "quantity": 2}]), "items"),
        (body(items="WIDGET"), "items"),
        (body(customer_id=""), "customer_id"),
        (body(customer_id="x" * 256), "customer_id"),
        (body(customer_id=42), "customer_id"),
        (body(payment_token=""), "payment_token"),
        ({"items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": "tok_visa"}, "customer_id"),
        ({"customer_id": "c", "items": [{"sku": "WIDGET", "quantity": 1}]}, "payment_token"),
        ({"customer_id": "c", "payment_token": "tok_visa"}, "items"),
        ([1, 2, 3], "body"),
    ],
)
def test_bad_input_is_400_with_field_errors_and_writes_nothing(client, storefront, data, field):
    response = post_checkout(client, data)

    assert response.status_code == 400, response.content
    error = response.json()
    assert error["code"] == "invalid"
    assert field in error["errors"], error
    assert all(isinstance(m, str) for messages in error["errors"].values() for m in messages)
    assert nothing_written()


def test_malformed_json_is_400(client, storefront):
    response = post_checkout(client, None, raw='{"customer_id": ')
    assert response.status_code == 400
    assert response.json()["code"] == "parse_error"
    assert response.json()["errors"]["body"]
    assert nothing_written()


@pytest.mark.parametrize("key", [None, "", "x" * 256, "naïve", "tab\there"])
def test_missing_or_invalid_idempotency_key_is_400(client, storefront, key):
    response = post_checkout(client, body(), key=key)
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["errors"]
    assert nothing_written()


def test_a_rejected_request_does_not_use_up_its_key(client, storefront):
    rejected = post_checkout(client, body(items=[{"sku": "NOPE", "quantity": 1}]))
    accepted = post_checkout(client, body())

    assert rejected.status_code == 400
    assert accepted.status_code == 201
    assert Order.objects.count() == 1


def test_order_detail_and_unknown_orders(client, storefront):
    created = post_checkout(client, body()).json()

    assert client.get(f"/api/orders/{created['id']}/").json() == created
    missing = client.get(f"/api/orders/{uuid.uuid4()}/")
    assert missing.status_code == 404
    assert missing.json() == {"code": "not_found", "detail": "No such order."}
    assert client.get("/api/orders/not-a-uuid/").status_code == 404


def test_the_order_keeps_the_price_of_checkout_time(client, storefront):
    created = post_checkout(client, body()).json()
    StorefrontProduct.objects.filter(sku="WIDGET").update(price=Decimal("99.00"))

    order = client.get(f"/api/orders/{created['id']}/").json()
    assert order["items"][0]["unit_price"] == "19.99"
    assert OrderLine.objects.get().unit_price == Decimal("19.99")


def test_the_hand_built_order_body_is_exactly_what_the_documented_serializer_gives(client, storefront):
    from orders.apis import OrderOutputSerializer, order_representation

    created = post_checkout(client, body(items=[{"sku": "WIDGET", "quantity": 3}, {"sku": "GADGET", "quantity": 1}]))
    order = Order.objects.get(pk=created.json()["id"])

    assert order_representation(order) == json.loads(json.dumps(OrderOutputSerializer(order).data))
    assert created.json() == order_representation(order)
