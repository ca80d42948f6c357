"""Payment tokens are masked in the admin's pages and never in the API's timeline."""

import json
import traceback
import uuid
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging.models import EventLogEntry, OutboxMessage
from reliable_messaging.operator import mask_sensitive

from orders.models import StorefrontProduct

pytestmark = pytest.mark.django_db
TOKEN = "tok_visa"
SECRET = "tok_1QXu Vm_SecretValue"
SECRET_TAIL = "Vm_SecretValue"


@pytest.fixture
def order_id() -> str:
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("19.99"), available=10, version=1)
    response = Client().post(
        "/api/checkout/",
        json.dumps({"customer_id": "c", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": SECRET}),
        content_type="application/json",
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )
    assert response.status_code == 201
    assert SECRET_TAIL not in response.content.decode()
    return response.json()["id"]


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "x"))
    return client


def test_admin_pages_show_tokens_masked(staff, order_id):
    row = OutboxMessage.objects.get(correlation_id=order_id)
    assert row.payload["payment_token"]["$encrypted"]["for"] == ["payments"]  # payments alone reads it
    entry = EventLogEntry.objects.create(
        message_id=str(row.event_id),
        event_type=row.event_type,
        correlation_id=order_id,
        payload=mask_sensitive(row.payload),
        recorded_at=timezone.now(),
    )
    try:
        raise ValueError(f"gateway rejected {{'payment_token': '{SECRET}'}}")
    except ValueError as exc:
        trace = traceback.format_exc()
        error = str(exc)
    letter = dead_letter_record(
        consumer="payments",
        body=json.dumps(row.payload).encode(),
        properties={"message_id": str(row.event_id), "correlation_id": order_id},
        headers={"event_type": row.event_type, "payment_token": SECRET},
        routing_key=row.event_type,
        reason="handler_error",
        error=error,
        traceback=trace,
    )

    pages = {
        "order": f"/admin/orders/order/{order_id}/change/",
        "outbox": f"/admin/messaging/outboxmessage/{row.pk}/change/",
        "event log": f"/admin/messaging/eventlogentry/{entry.pk}/change/",
        "dead letter": f"/admin/messaging/deadletter/{letter.pk}/change/",
        "dead letters": "/admin/messaging/deadletter/",
    }
    shown = {name: staff.get(url).content.decode() for name, url in pages.items()}
    assert [name for name, html in shown.items() if SECRET_TAIL in html] == []
    # the payload's token is ciphertext, never shown; one elsewhere (a header, an error) is masked
    assert [name for name, html in shown.items() if "tok_****" in html] == ["dead letter"]


def test_the_api_timeline_never_carries_payloads(order_id):
    body = Client().get(f"/api/orders/{order_id}/").json()
    assert sorted(body["timeline"][0]) == [
        "causation_id",
        "event_type",
        "message_id",
        "occurred_at",
        "published_at",
        "source",
        "state",
    ]
