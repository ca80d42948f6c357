"""Trace headers are a hostile peer's too (issue 43): an invalid or oversized ``tracestate`` is
dropped (a valid ``traceparent`` kept), an invalid ``traceparent`` starts a new trace; checkout and
cancel never answer 500 for them (the outbox's ``tracestate`` column holds 512 characters; a span
holding one: the bus's own tests, test_tracing.py)."""

import json
import uuid
from decimal import Decimal

import pytest
from django.test import Client
from reliable_messaging.models import OutboxMessage

from orders.models import StorefrontProduct

pytestmark = pytest.mark.django_db

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{TRACE_ID}-b7ad6b7169203331-01"
BODY = json.dumps({"customer_id": "c", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": "tok_visa"})
# Three valid members, 519 characters in all: valid for OpenTelemetry (up to 8,192), not for the row.
LONG = f"a={'x' * 255},b={'y' * 255},c=z"
TOO_MANY = ",".join(f"k{i}=v" for i in range(33))


@pytest.fixture(autouse=True)
def widget():
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("1.00"), available=10, version=1)


def checkout(headers: dict):
    headers = {"Idempotency-Key": str(uuid.uuid4()), **headers}
    return Client().post("/api/checkout/", BODY, content_type="application/json", headers=headers)


def stored(order_id: str, event_type: str) -> tuple[str, str]:
    row = OutboxMessage.objects.get(correlation_id=order_id, event_type=event_type)
    return row.traceparent.split("-")[1], row.tracestate


@pytest.mark.parametrize("tracestate", [LONG, TOO_MANY, "bad member!", "a=1,a=2"])
def test_an_invalid_or_oversized_tracestate_is_dropped_and_the_trace_kept_at_checkout_and_cancel(tracestate):
    headers = {"traceparent": TRACEPARENT, "tracestate": tracestate}
    placed = checkout(headers)
    assert placed.status_code == 201
    order_id = placed.json()["id"]
    cancelled = Client().post(f"/api/orders/{order_id}/cancel/", headers=headers)

    assert cancelled.status_code == 202
    assert placed["traceresponse"].split("-")[1] == cancelled["traceresponse"].split("-")[1] == TRACE_ID
    assert stored(order_id, "orders.order.created") == (TRACE_ID, "")
    assert stored(order_id, "orders.order.cancelled") == (TRACE_ID, "")


def test_a_valid_tracestate_is_kept():
    placed = checkout({"traceparent": TRACEPARENT, "tracestate": "vendor=abc,other=1"})
    assert placed.status_code == 201
    assert stored(placed.json()["id"], "orders.order.created") == (TRACE_ID, "vendor=abc,other=1")


@pytest.mark.parametrize(
    "traceparent", [f"00-{TRACE_ID}-0000000000000000-01", "00-xyz", f"00-{TRACE_ID}-b7ad6b7169203331-01-extra" * 50]
)
def test_an_invalid_traceparent_starts_a_new_trace(traceparent):
    placed = checkout({"traceparent": traceparent, "tracestate": LONG})

    assert placed.status_code == 201
    trace_id, tracestate = stored(placed.json()["id"], "orders.order.created")
    assert trace_id == placed["traceresponse"].split("-")[1]
    assert (trace_id != TRACE_ID, len(trace_id), tracestate) == (True, 32, "")
