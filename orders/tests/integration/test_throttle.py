"""CHECKOUT_THROTTLE: a DRF rate per client on checkout only; off by default."""

import json
import uuid
from decimal import Decimal

import pytest
from django.core.cache import cache
from django.test import Client
from rest_framework.throttling import ScopedRateThrottle

from orders.models import StorefrontProduct

pytestmark = pytest.mark.django_db

BODY = json.dumps({"customer_id": "c", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": "tok_visa"})


@pytest.fixture(autouse=True)
def storefront():
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("1.00"), available=10, version=1)
    cache.clear()
    yield
    cache.clear()


def checkout(client: Client, forwarded_for: str | None = None):
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    if forwarded_for:
        headers["X-Forwarded-For"] = forwarded_for
    return client.post("/api/checkout/", BODY, content_type="application/json", headers=headers)


def test_checkout_is_not_throttled_by_default():
    assert [checkout(Client()).status_code for _ in range(5)] == [201] * 5


def test_a_client_over_the_rate_gets_429_with_retry_after_and_other_endpoints_stay_open(monkeypatch):
    # DRF reads the rates once at import; CHECKOUT_THROTTLE=2/min would set exactly this.
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"checkout": "2/min"})
    client = Client()

    statuses = [checkout(client).status_code for _ in range(3)]
    refused = checkout(client)

    assert statuses == [201, 201, 429]
    assert refused.json()["code"] == "throttled"
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert client.get("/api/products/").status_code == 200


def test_a_forged_x_forwarded_for_does_not_escape_the_throttle(monkeypatch):
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"checkout": "2/min"})
    client = Client()
    statuses = [checkout(client, forwarded_for=f"10.0.0.{i}").status_code for i in range(3)]
    assert statuses == [201, 201, 429]
