"""Checkout keys: takeover of a dead process's key, a lost claim, expiry."""

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from orders.models import CheckoutRequest, Order, StorefrontProduct
from orders.services import checkout as service
from orders.services.checkout import (
    CheckoutKeyLost,
    Line,
    checkout,
    checkout_key_claim,
    checkout_keys_purge,
    request_fingerprint,
)
from tests.conftest import ALL_DATABASES

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

BODY = {"customer_id": "c", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": "tok_visa"}


@pytest.fixture(autouse=True)
def storefront():
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("3.00"), available=9, version=1)


def post(key="k"):
    return Client().post(
        "/api/checkout/", json.dumps(BODY), content_type="application/json", headers={"Idempotency-Key": key}
    )


def test_a_key_left_in_flight_by_a_dead_process_is_taken_over_after_its_lease():
    checkout_key_claim(key="k", request_hash=request_fingerprint(BODY))  # its process dies here
    assert post().status_code == 409

    CheckoutRequest.objects.filter(key="k").update(locked_until=timezone.now() - timedelta(seconds=1))
    response = post()

    assert response.status_code == 201
    assert Order.objects.count() == 1
    assert post().headers["Idempotent-Replayed"] == "true"


def test_a_slow_request_whose_key_was_taken_over_keeps_nothing():
    slow_claim = checkout_key_claim(key="k", request_hash=request_fingerprint(BODY))
    CheckoutRequest.objects.filter(key="k").update(locked_until=timezone.now() - timedelta(seconds=1))
    assert post().status_code == 201  # the takeover completes first

    # The slow request finally completes with its old claim: rejected, its order rolled back.
    with pytest.raises(CheckoutKeyLost):
        with transaction.atomic():
            order = service.order_place(customer_id="c", lines=[Line("WIDGET", 1)], payment_token="tok_visa")
            service._checkout_key_complete(key="k", token=slow_claim, order=order, status=201, body={})
    assert Order.objects.count() == 1


def test_expired_keys_are_forgotten_and_purged(settings):
    assert post().status_code == 201
    CheckoutRequest.objects.update(created_at=timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL + 1))

    assert checkout_keys_purge() == 1
    assert CheckoutRequest.objects.count() == 0
    assert post().status_code == 201  # the key is usable again: a new order
    assert Order.objects.count() == 2


def test_a_failure_inside_checkout_releases_the_key():
    def broken_render(order):
        raise RuntimeError("renderer broke")

    with pytest.raises(RuntimeError):
        checkout(
            key="k",
            request_hash=request_fingerprint(BODY),
            customer_id="c",
            lines=[Line("WIDGET", 1)],
            payment_token="tok_visa",
            render=broken_render,
        )
    assert (Order.objects.count(), CheckoutRequest.objects.count()) == (0, 0)
    assert post().status_code == 201
