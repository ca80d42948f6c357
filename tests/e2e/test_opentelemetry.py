"""OpenTelemetry on the real stack as the Procfile runs it: one trace from the checkout request
through every hop of the saga and every process, exported over OTLP/HTTP (protobuf) to an endpoint
that decodes what it gets. What each span of the bus says (its name, attributes, batch links, a
dead letter's error) is the bus's own test: packages/django-reliable-messaging/tests/test_message_spans.py.

The processes are the Procfile's (a web server, a relay, `run_consumers --except orders,events` and
`run_consumers orders events`) with only the standard variables set: OTEL_EXPORTER_OTLP_ENDPOINT
and OTEL_BSP_SCHEDULE_DELAY (so spans leave within a fraction of a second, not 5 s).
"""

import json
import urllib.request
import uuid
from collections import Counter

import pytest
from reliable_messaging import _topology as topology
from reliable_messaging._topology import subscribers_of
from reliable_messaging.models import OutboxMessage

from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import ProcessGroup, free_port, wait_until
from faultlib.saga import seed_catalog
from faultlib.web import call, checkout_body, get
from tests.support.otlp import OtlpReceiver
from tests.support.split import SplitSystem

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
SHOP_CONSUMERS = ("orders", "payments", "inventory", "shipping", "events")
SAGA = [
    "orders.order.created",
    "payments.payment.succeeded",
    "inventory.stock.reserved",
    "orders.order.confirmed",
    "shipping.shipment.created",
]


@pytest.fixture
def otlp():
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


def checkout(web: str) -> dict:
    request = urllib.request.Request(
        f"{web}/api/checkout/",
        data=json.dumps(
            {"customer_id": "otel", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": "tok_visa"}
        ).encode(),
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": str(uuid.uuid4()),
            "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        served = {"http_status": response.status, "traceresponse": response.headers["traceresponse"]}
        return {**served, **json.load(response)}


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_the_whole_saga_is_one_trace_of_server_producer_and_consumer_spans(otlp, processes, quiet_broker):
    tracing = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    port = free_port()
    web = f"http://127.0.0.1:{port}"
    processes.start("web", "runserver", f"127.0.0.1:{port}", "--noreload", env=tracing)
    processes.start("relay", "run_outbox_relay", env=tracing)
    processes.start("consumers", "run_consumers", "--except", "orders,events", env=tracing)  # as the Procfile
    processes.start("orders-consumers", "run_consumers", "orders", "events", env=tracing)
    seed_catalog()
    wait_until(lambda: answers(f"{web}/healthz"), timeout=30, message="the web server")

    # when a checkout arrives with the caller's traceparent
    placed = checkout(web)
    assert placed["http_status"] == 201
    order_id = placed["id"]
    wait_until(
        lambda: (
            get(web, f"/api/orders/{order_id}/").json()["status"] == "CONFIRMED"
            and OutboxMessage.objects.filter(correlation_id=order_id, event_type=SAGA[-1]).exists()
            and not OutboxMessage.objects.filter(correlation_id=order_id, published_at__isnull=True).exists()
        ),
        timeout=30,
        message="the order confirmed and its events published",
    )
    rows = {row.event_type: row for row in OutboxMessage.objects.filter(correlation_id=order_id)}
    assert sorted(rows) == sorted(SAGA)
    message_ids = {str(row.event_id): event_type for event_type, row in rows.items()}
    shop_handles = {
        "orders.order.created": ["payments", "events"],
        "payments.payment.succeeded": ["orders", "inventory", "events"],  # orders notes the payment
        "inventory.stock.reserved": ["orders", "events"],
        "orders.order.confirmed": ["shipping", "events"],
        "shipping.shipment.created": ["events"],
    }
    # Every consumer bound to each event handles it: the shop's, and a follower installed later.
    handled_by = {event_type: subscribers_of(event_type) for event_type in SAGA}
    assert {e: [c for c in bound if c in SHOP_CONSUMERS] for e, bound in handled_by.items()} == shop_handles
    expected_consumer_spans = sum(len(consumers) for consumers in handled_by.values())

    def saga_spans(kind: str) -> list:
        spans = otlp.in_trace(TRACE_ID)
        return [s for s in spans if s.kind == kind and s.attributes.get("messaging.message.id") in message_ids]

    # The web process exports its SERVER span on its own, apart from the relay's and the consumers': wait for it too.
    wait_until(
        lambda: (
            len(saga_spans("PRODUCER")) == len(SAGA)
            and len(saga_spans("CONSUMER")) == expected_consumer_spans
            and any(s.kind == "SERVER" for s in otlp.in_trace(TRACE_ID))
        ),
        timeout=30,
        interval=0.2,
        message="every PRODUCER and CONSUMER span of the saga, and the SERVER span, at the OTLP endpoint",
    )
    spans = otlp.in_trace(TRACE_ID)

    # then the checkout's SERVER span continues the caller's trace, served by the web process
    [server] = [s for s in spans if s.kind == "SERVER"]
    assert (server.parent_id, server.service) == (CALLER_SPAN, "saga-shop-web")
    assert placed["traceresponse"] == f"00-{TRACE_ID}-{server.span_id}-01"
    assert any(s.kind == "CLIENT" and s.parent_id == server.span_id for s in spans), "the checkout's queries"

    # each event has one PRODUCER span from the relay, the child of the span it was written in,
    # and the message carried that PRODUCER span
    producers = {s.attributes["messaging.message.id"]: s for s in saga_spans("PRODUCER")}
    assert len(producers) == len(SAGA)
    assert {producer.service for producer in producers.values()} == {"saga-shop-relay"}
    assert producers[str(rows["orders.order.created"].event_id)].parent_id == server.span_id
    assert rows["orders.order.created"].traceparent == f"00-{TRACE_ID}-{server.span_id}-01"

    # each message each context handled has one CONSUMER span, the child of its PRODUCER span,
    # in the process that runs that consumer
    consumers = saga_spans("CONSUMER")
    assert Counter(
        (s.attributes["messaging.consumer.group.name"], message_ids[s.attributes["messaging.message.id"]])
        for s in consumers
    ) == Counter(  # fmt: skip
        (consumer, event_type) for event_type, names in handled_by.items() for consumer in names
    )
    # The Procfile's two consumer processes: orders and the event log, and every other consumer.
    others = [c for c in topology.consumers() if c not in ("orders", "events")]
    process_of = {
        **dict.fromkeys(others, f"saga-shop-consumers-{'-'.join(others)}"),
        "orders": "saga-shop-consumers-orders-events",
        "events": "saga-shop-consumers-orders-events",
    }
    for span in consumers:
        message_id = span.attributes["messaging.message.id"]
        consumer = span.attributes["messaging.consumer.group.name"]
        assert span.parent_id == producers[message_id].span_id
        assert span.service == process_of[consumer]

    # what a handler published is the child of the CONSUMER span that handled its cause
    consumer_at = {
        (s.attributes["messaging.consumer.group.name"], message_ids[s.attributes["messaging.message.id"]]): s
        for s in consumers
    }
    for event_type, cause in [
        ("payments.payment.succeeded", ("payments", "orders.order.created")),
        ("inventory.stock.reserved", ("inventory", "payments.payment.succeeded")),
        ("orders.order.confirmed", ("orders", "inventory.stock.reserved")),
        ("shipping.shipment.created", ("shipping", "orders.order.confirmed")),
    ]:
        assert producers[str(rows[event_type].event_id)].parent_id == consumer_at[cause].span_id


@pytest.fixture
def split(tmp_path):
    with SplitSystem.migrated(tmp_path / "split") as system:
        yield system


@pytest.fixture
def split_group(tmp_path):
    (tmp_path / "logs").mkdir()
    group = ProcessGroup(tmp_path / "logs", {})
    yield group
    group.stop_all()
    print(group.logs())


def test_a_split_deployment_puts_the_saga_in_one_trace_across_its_deployments(otlp, split, split_group):
    tracing = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    split["orders"].start(split_group, "web", "runserver", f"127.0.0.1:{port}", "--noreload", env=tracing)
    for deployment in split.deployments.values():
        deployment.start(split_group, "relay", "run_outbox_relay", env=tracing)
        deployment.start(split_group, "consumers", "run_consumers", env=tracing)
    seeded = split["inventory"].manage("seed_catalog")
    assert seeded.returncode == 0, seeded.stderr
    wait_until(lambda: get(api, "/api/products/").status == 200 and len(get(api, "/api/products/").json()) == 4,
               timeout=60, message="orders' copy of the catalogue")  # fmt: skip

    placed = call(
        api, "POST", "/api/checkout/", checkout_body("WIDGET", 1),
        headers={"Idempotency-Key": str(uuid.uuid4()), "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"},
    )  # fmt: skip
    assert placed.status == 201, placed.body
    order_id = placed.json()["id"]
    wait_until(lambda: get(api, f"/api/orders/{order_id}/").json()["status"] == "CONFIRMED", timeout=60,
               message="the order confirmed across the deployments")  # fmt: skip

    def services(kind: str) -> Counter:
        return Counter(
            (s.service, s.attributes["messaging.rabbitmq.destination.routing_key"] if kind == "PRODUCER"
             else f'{s.attributes["messaging.consumer.group.name"]} <- {s.name.removeprefix("process ")}')
            for s in otlp.in_trace(TRACE_ID)
            if s.kind == kind and s.attributes.get("messaging.message.conversation_id") == order_id
        )  # fmt: skip

    producers = Counter(
        {
            ("saga-shop-orders-relay", "orders.order.created"): 1,
            ("saga-shop-payments-relay", "payments.payment.succeeded"): 1,
            ("saga-shop-inventory-relay", "inventory.stock.reserved"): 1,
            ("saga-shop-orders-relay", "orders.order.confirmed"): 1,
            ("saga-shop-shipping-relay", "shipping.shipment.created"): 1,
        }
    )
    consumers = Counter(
        {
            ("saga-shop-payments-consumers", "payments <- orders.order.created"): 1,
            ("saga-shop-inventory-consumers", "inventory <- payments.payment.succeeded"): 1,
            ("saga-shop-orders-consumers", "orders <- payments.payment.succeeded"): 1,
            ("saga-shop-orders-consumers", "orders <- inventory.stock.reserved"): 1,
            ("saga-shop-shipping-consumers", "shipping <- orders.order.confirmed"): 1,
            **{("saga-shop-orders-consumers", f"events <- {event_type}"): 1 for event_type in SAGA},
            # and any context that follows the saga, in its own deployment
            **{
                (f"saga-shop-{consumer}-consumers", f"{consumer} <- {event_type}"): 1
                for event_type in SAGA
                for consumer in subscribers_of(event_type)
                if consumer not in SHOP_CONSUMERS
            },
        }
    )
    # The orders web process exports its SERVER span on its own, apart from the relays and consumers: wait for it too.
    wait_until(
        lambda: (
            services("PRODUCER") == producers
            and services("CONSUMER") == consumers
            and any(s.kind == "SERVER" for s in otlp.in_trace(TRACE_ID))
        ),
        timeout=30,
        interval=0.2,
        message=f"{producers} and {consumers} in the trace, and the SERVER span",
    )
    [server] = [s for s in otlp.in_trace(TRACE_ID) if s.kind == "SERVER"]
    assert (server.service, server.parent_id) == ("saga-shop-orders-web", CALLER_SPAN)
