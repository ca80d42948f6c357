"""Payment tokens are never shown in full outside payments: admin, timeline, logs, dead letters."""

import io
import json
import logging
import traceback
import uuid
from decimal import Decimal

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from config.logging import configure_logging
from messaging.api import mask_sensitive, mask_text
from messaging.dead_letters import dead_letter_record
from messaging.models import EventLogEntry, OutboxMessage
from orders.models import StorefrontProduct

pytestmark = pytest.mark.django_db

TOKEN = "tok_visa"
# Free text with a space: masked whole everywhere, never "tok_**** Vm_SecretValue".
SECRET = "tok_1QXu Vm_SecretValue"
SECRET_TAIL = "Vm_SecretValue"


def test_mask_sensitive_masks_the_value_of_every_sensitive_key_at_any_depth():
    data = {"payment_token": SECRET, "nested": [{"payment_token": "opaque-secret"}], "total": "1.00"}
    assert mask_sensitive(data) == {
        "payment_token": "tok_****",
        "nested": [{"payment_token": "****"}],
        "total": "1.00",
    }


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"{{'payment_token': '{SECRET}'}}", "{'payment_token': 'tok_****'}"),
        (f'{{"payment_token": "{SECRET}"}}', '{"payment_token": "tok_****"}'),
        (f"payment_token={SECRET}, total=1", "payment_token=tok_****, total=1"),
        # A free-text token with a space, quoted or not, is masked whole.
        ("{'payment_token': 'tok_a b_SECRET'}", "{'payment_token': 'tok_****'}"),
        ('{"payment_token": "tok_a b_SECRET", "total": 1}', '{"payment_token": "tok_****", "total": 1}'),
        ('{"payment_token": "tok_a\\" b_SECRET"}', '{"payment_token": "tok_****"}'),
        ("payment_token=tok_a b_SECRET, total=1", "payment_token=tok_****, total=1"),
        ("payment_token=tok_a b_SECRET\nnext line", "payment_token=tok_****\nnext line"),
        # Only a short run of letters before "_" is shown: it names the token's kind.
        ("payment_token='a b_SECRET'", "payment_token='****'"),
        ("payment_token=SECRET12_x", "payment_token=****"),
        ("nothing to hide", "nothing to hide"),
    ],
)
def test_mask_text_masks_tokens_inside_free_text(text, masked):
    assert mask_text(text) == masked


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
    assert row.payload["payment_token"] == SECRET  # payments needs the real one
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
    for name, url in pages.items():
        html = staff.get(url).content.decode()
        assert SECRET_TAIL not in html, name
    for name in ("order", "outbox", "event log", "dead letter"):
        assert "tok_****" in staff.get(pages[name]).content.decode(), name


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


@pytest.fixture
def json_logs():
    """What the root handler would write with LOG_FORMAT=json, captured in memory."""
    configure_logging("json", "INFO")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.getLogger().handlers[0].formatter)
    logging.getLogger("tests.masking").addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logging.getLogger("tests.masking").removeHandler(handler)
    configure_logging(settings.LOG_FORMAT, settings.LOG_LEVEL)


def test_log_lines_mask_tokens_in_fields_messages_and_tracebacks(json_logs):
    log = logging.getLogger("tests.masking")
    log.warning(
        "charging %s", {"payment_token": SECRET}, extra={"payment_token": SECRET, "payload": {"payment_token": SECRET}}
    )
    try:
        raise RuntimeError(f"payment_token={SECRET}")
    except RuntimeError:
        log.exception("failed")

    warning, failure = json_logs()
    assert (warning["event"], warning["payment_token"], warning["payload"]) == (
        "charging {'payment_token': 'tok_****'}",
        "tok_****",
        {"payment_token": "tok_****"},
    )
    assert failure["event"] == "failed"
    assert failure["exception"].endswith("RuntimeError: payment_token=tok_****")
    assert SECRET_TAIL not in json.dumps([warning, failure])
