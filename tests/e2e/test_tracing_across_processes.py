"""The trace id travels from the checkout request through every process, and the JSON log lines
let one order be followed with one grep, with tracing off (no OTEL_* variables): each hop is a span id of its own
under the caller's trace, nothing is recorded. tests/e2e/test_opentelemetry.py runs the same saga exporting spans
to an OTLP endpoint."""

import json
import re
import uuid
from collections import Counter
from decimal import Decimal

import pytest
from django.test import Client
from reliable_messaging._topology import subscribers_of
from reliable_messaging.models import OutboxMessage

from faultlib.broker import publish_raw
from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import wait_until
from faultlib.saga import ledger
from inventory.models import Product
from orders.models import Order, StorefrontProduct
from tests.support.waits import read_until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


def log_lines(path) -> list[dict]:
    """The JSON lines written so far; a last line still being written is left for the next read."""
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.startswith("{")]


def handled_of(lines: list[dict], order_id: str) -> list[tuple[str, str]]:
    """(consumer, event type) of every line saying a message of ``order_id`` was handled."""
    return sorted(
        (line["consumer"], line["event_type"])
        for line in lines
        if "message_id" in line and line.get("correlation_id") == order_id and line.get("event") == "handled"
    )


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_the_trace_id_travels_from_checkout_through_every_hop_and_every_consumer_line_names_its_message(
    processes, capture, quiet_broker, tmp_path
):
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("19.99"), available=5, version=1)
    Product.objects.create(sku="WIDGET", name="Widget", price=Decimal("19.99"), stock=5)
    wire = capture("#")
    json_logs = {"LOG_FORMAT": "json"}
    processes.start("relay", "run_outbox_relay", env=json_logs)
    consumers = processes.start("consumers", "run_consumers", env=json_logs)

    response = Client().post(
        "/api/checkout/",
        json.dumps({"customer_id": "c", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": "tok_visa"}),
        content_type="application/json",
        headers={"Idempotency-Key": str(uuid.uuid4()), "traceparent": INCOMING},
    )
    assert response.status_code == 201
    order_id = response.json()["id"]
    served_by = response.headers["traceresponse"]
    assert served_by.split("-")[1] == TRACE_ID

    wait_until(
        lambda: (
            Order.objects.get(pk=order_id).status == "CONFIRMED"
            and OutboxMessage.objects.filter(correlation_id=order_id).count() == 5  # with the shipment's
            and OutboxMessage.objects.filter(correlation_id=order_id, published_at__isnull=True).count() == 0
        ),
        timeout=30,
        message="the order to be confirmed, its shipment created and their events published",
    )
    rows = OutboxMessage.objects.filter(correlation_id=order_id).order_by("created_at")
    assert [row.event_type for row in rows] == [
        "orders.order.created",
        "payments.payment.succeeded",
        "inventory.stock.reserved",
        "orders.order.confirmed",
        "shipping.shipment.created",
    ]
    # The request's own span on the first event; every later hop keeps the trace id.
    assert rows[0].traceparent == served_by
    assert {row.traceparent.split("-")[1] for row in rows} == {TRACE_ID}
    assert len({row.traceparent for row in rows}) == 5  # each hop is a span of its own
    on_the_wire = {mid: headers for mid, headers, _ in wire.drain()}
    assert {on_the_wire[str(row.event_id)]["traceparent"] for row in rows} == {row.traceparent for row in rows}

    # The same order.created delivered again, straight into payments' queue: a duplicate.
    created = rows[0]
    publish_raw(
        "payments_queue",
        json.dumps(created.payload).encode(),
        properties={"message_id": str(created.event_id), "correlation_id": order_id},
        headers={"event_type": created.event_type, "schema_version": created.schema_version},
        exchange="",
    )
    consumers_log = next(log for name, _, log in processes.procs if name == "consumers")
    # every consumer bound to each of the saga's events (the declarations say which), the event log too:
    # each logs its own handling, apart from the duplicate's line, so wait for all of them
    expected = sorted((consumer, row.event_type) for row in rows for consumer in subscribers_of(row.event_type))
    read_until(
        lambda: log_lines(consumers_log),
        lambda lines: (
            any(line.get("event", "").startswith("dup") for line in lines)
            and not Counter(expected) - Counter(handled_of(lines, order_id))
        ),
        timeout=30,
        what="the duplicate and every handled line of the saga in the consumers' log",
    )
    processes.stop(consumers)
    assert ledger(order_id) == [("charge", Decimal("19.99"))]

    lines = log_lines(consumers_log)
    about_messages = [line for line in lines if "message_id" in line]
    assert about_messages, lines
    for line in about_messages:
        assert {"consumer", "event_type", "correlation_id"} <= line.keys(), line
        if line.get("correlation_id") == order_id and line["event"] == "handled":
            assert line["trace_id"] == TRACE_ID, line
    assert handled_of(lines, order_id) == expected
    duplicates = [(line["consumer"], line["message_id"]) for line in about_messages if line["event"].startswith("dup")]
    assert duplicates == [("payments", str(created.event_id))]
    assert "tok_visa" not in consumers_log.read_text()
