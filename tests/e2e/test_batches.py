"""Batched consumers as the shop runs them: inventory's batches that lock the same products, and
the event log's batches.

The bus's own batch tests (one transaction for what waits, a failing member alone, a message twice
in a batch) are the package's: packages/django-reliable-messaging/tests/test_consumer_batches.py.
The consumer counts its batches (``messaging_consumer_batch_size``, on ``--metrics-port``). Rows
written inside a savepoint carry the savepoint's own transaction id (``xmin``), so only rows of the
savepoint-free attempt share one: the last test uses that.
"""

import json
import urllib.request
import uuid
from collections import Counter
from decimal import Decimal

import pytest
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families
from reliable_messaging.models import DeadLetter, EventLogEntry, InboxMessage, OutboxMessage

from faultlib.broker import publish_raw
from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import broker_queue_depths
from faultlib.processes import free_port, wait_until
from tests.support.waits import read_until

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

BATCHED = ("messaging_consumer_batch_size_sum", ())  # the deliveries a consumer has counted


def payment_succeeded(order_id: str, sku: str) -> dict:
    """A payments.payment.succeeded v1 payload (payments/schemas/) for one unit of ``sku``."""
    return {
        "order_id": order_id,
        "amount": "1.00",
        "currency": "USD",
        "charge_id": f"ch_{order_id}",
        "items": [{"sku": sku, "quantity": 1}],
    }


def send(event_type: str, payload: dict, message_id: str | None = None) -> str:
    message_id = message_id or str(uuid.uuid4())
    publish_raw(
        event_type,
        json.dumps(payload).encode(),
        properties={"message_id": message_id, "correlation_id": payload["order_id"]},
        headers={"event_type": event_type, "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"},
    )
    return message_id


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape_settled(port: int, deliveries: int) -> dict[tuple[str, tuple], float]:
    """The consumer's samples once it has counted ``deliveries`` deliveries. It acks a batch before
    counting it (its outcomes, then its size, last): an empty queue does not say it has counted."""
    return read_until(
        lambda: scrape(port),
        lambda samples: samples.get(BATCHED, 0) >= deliveries,
        timeout=30,
        what=f"the consumer's counts of {deliveries} deliveries",
    )


def outcomes(samples: dict, consumer: str) -> dict[str, float]:
    found: Counter = Counter()
    for (name, labels), value in samples.items():
        labels = dict(labels)
        if name == "messaging_consumer_messages_total" and labels["consumer"] == consumer:
            found[labels["outcome"]] += value
    return dict(found)


def queue_empty(name: str) -> bool:
    return (broker_queue_depths() or {}).get(name) == 0


def test_two_consumer_processes_whose_batches_lock_the_same_products_never_deadlock_for_good(processes, quiet_broker):
    # Orders of one SKU each, alternating between two hot products: two batches can each hold one
    # product and want the other. PostgreSQL breaks such a cycle (40P01) and the loser is decided
    # again. Whether a run meets one is timing (none in some runs here), so this test holds the
    # invariants under whatever contention comes; the bus's own
    # packages/django-reliable-messaging/tests/test_batch_deadlocks.py forces the deadlocks and
    # proves the loser's path.
    from inventory.models import Product, Reservation  # the context's own: the file collects without it

    Product.objects.bulk_create(
        [Product(sku="HOT-A", name="A", price=Decimal("1.00"), stock=10_000),
         Product(sku="HOT-B", name="B", price=Decimal("1.00"), stock=10_000)]
    )  # fmt: skip
    orders = [str(uuid.uuid4()) for _ in range(300)]
    for n, order_id in enumerate(orders):
        sku = "HOT-A" if n % 2 else "HOT-B"
        send("payments.payment.succeeded", payment_succeeded(order_id, sku))
    wait_until(lambda: (broker_queue_depths() or {}).get("inventory_queue") == 300, timeout=60, message="queued")

    ports = [free_port(), free_port()]
    workers = [
        processes.start(
            "inventory", "run_consumers", "inventory", "--metrics-port", str(port), env={"CONSUMER_BATCH_SIZE": "20"}
        )
        for port in ports
    ]
    wait_until(lambda: InboxMessage.objects.filter(consumer="inventory").count() == 300, timeout=180, message="300")
    wait_until(lambda: queue_empty("inventory_queue"), timeout=30, message="every delivery acked")
    batches = read_until(
        lambda: [scrape(port) for port in ports],
        lambda scraped: sum(samples.get(BATCHED, 0) for samples in scraped) >= 300,
        timeout=30,
        what="both consumers' counts of the 300 deliveries",
    )
    assert [processes.stop(w) for w in workers] == [0, 0]

    assert Reservation.objects.filter(status=Reservation.Status.RESERVED).count() == 300
    assert sorted(Product.objects.values_list("sku", "stock")) == [("HOT-A", 10_000 - 150), ("HOT-B", 10_000 - 150)]
    assert OutboxMessage.objects.filter(event_type="inventory.stock.reserved").count() == 300
    assert not DeadLetter.objects.exists()
    # Both took batches larger than one: their batches did hold several products' locks at once.
    for samples in batches:
        assert samples[("messaging_consumer_batch_size_sum", ())] > samples[("messaging_consumer_batch_size_count", ())]


def test_the_event_log_records_a_batch_with_one_insert(processes, quiet_broker):
    payloads = [{"order_id": str(uuid.uuid4())} for _ in range(30)]
    message_ids = [send("orders.order.confirmed", payload) for payload in payloads]
    send("orders.order.confirmed", payloads[3], message_ids[3])  # once more: the same message
    wait_until(lambda: (broker_queue_depths() or {}).get("events_queue") == 31, timeout=30, message="31 queued")
    port = free_port()

    consumer = processes.start("events", "run_consumers", "events", "--metrics-port", str(port))
    wait_until(lambda: queue_empty("events_queue"), timeout=60, message="every delivery acked")
    samples = scrape_settled(port, 31)
    assert processes.stop(consumer) == 0

    assert sorted(EventLogEntry.objects.values_list("message_id", flat=True)) == sorted(message_ids)
    assert InboxMessage.objects.filter(consumer="events").count() == 30
    assert outcomes(samples, "events") == {"handled": 30, "duplicate": 1}
    # Rows written by one statement inside one savepoint share its transaction id (xmin): far fewer
    # distinct ones than rows means the batches went in whole, not a savepoint per message.
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(DISTINCT xmin::text) FROM messaging_event_log")
        assert cursor.fetchone()[0] <= samples[("messaging_consumer_batch_size_count", ())] < 30
