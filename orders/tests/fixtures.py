"""Fixtures of the tests that read an order's pages (orders' own and the project's): a staff client,
and one order placed through the API (PENDING, its ``orders.order.created`` in the outbox). Each
tier's conftest.py that needs them imports them from here."""

import json
import uuid
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client

from orders.models import StorefrontProduct


@pytest.fixture
def staff(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "x"))
    return client


@pytest.fixture
def order_id(db) -> str:
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("19.99"), available=10, version=1)
    response = Client().post(
        "/api/checkout/",
        json.dumps({"customer_id": "c", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": "tok_visa"}),
        content_type="application/json",
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert response.status_code == 201
    return response.json()["id"]
