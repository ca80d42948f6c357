"""Consumers: duplicates have no second effect, poison messages become dead letters, retries."""

import json
import time
import urllib.request
import uuid
from decimal import Decimal

import pytest
from prometheus_client.parser import text_string_to_metric_families
from reliable_messaging._topology import subscribers_of
from reliable_messaging.models import DeadLetter, InboxMessage, OutboxMessage

from faultlib.broker import publish_raw
from faultlib.processes import free_port, wait_until
from faultlib.saga import ledger
from inventory.models import Reservation
from payments.models import Payment
from tests.conftest import ALL_DATABASES
from tests.support.locks import payment_row_held
from tests.support.waits import read_until

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


def log_lines(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


def outcomes(lines: list[dict], event: str) -> list[tuple[str, str]]:
    return sorted((line["consumer"], line["message_id"]) for line in lines if line["event"] == event)


def outcomes_counted(port: int) -> dict[str, float]:
    """The consumer's counts of orders.order.created deliveries by outcome, from its --metrics-port."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        exposed = response.read().decode()
    return {
        s.labels["outcome"]: s.value
        for family in text_string_to_metric_families(exposed)
        for s in family.samples
        if s.name == "messaging_consumer_messages_total" and s.labels["event_type"] == "orders.order.created"
    }


def order_created(order_id: str, token: str = "tok_visa", **overrides) -> dict:
    payload = {
        "order_id": order_id,
        "customer_id": "c",
        "total": "10.00",
        "currency": "USD",
        "items": [{"sku": "WIDGET", "quantity": 1, "unit_price": "10.00"}],
        "payment_token": token,
    }
    payload.update(overrides)
    return payload


def headers(event_type: str, version: int = 1) -> dict:
    return {"event_type": event_type, "schema_version": version, "occurred_at": "2026-01-01T00:00:00+00:00"}


def send(event_type: str, payload: dict, message_id: str, queue: str | None = None, **header_overrides):
    """Through the topic exchange, or straight into one queue (as a retry or replay would)."""
    publish_raw(
        queue or event_type,
        json.dumps(payload).encode(),
        properties={"message_id": message_id, "correlation_id": payload.get("order_id", "")},
        headers={**headers(event_type), **header_overrides},
        exchange="" if queue else None,
    )


def test_a_message_delivered_twice_to_two_contexts_is_handled_once_by_each(processes, quiet_broker):
    order_id, message_id = str(uuid.uuid4()), str(uuid.uuid4())
    for _ in range(2):
        send("orders.order.failed", {"order_id": order_id, "reason": "timeout"}, message_id)

    result = processes.run("run_consumers", "--once", env={"LOG_FORMAT": "json"})

    assert result.returncode == 0, result.stderr
    lines = log_lines(result.stderr)
    consumers = sorted(subscribers_of("orders.order.failed"))  # events, inventory, payments, and any follower
    assert {"events", "inventory", "payments"} <= set(consumers)
    assert outcomes(lines, "handled") == [(c, message_id) for c in consumers]
    assert outcomes(lines, "duplicate: already handled, acked without effect") == [(c, message_id) for c in consumers]
    assert sorted(InboxMessage.objects.filter(message_id=message_id).values_list("consumer", flat=True)) == consumers
    # Each context's effect happened once: a tombstone each, nothing else.
    assert Payment.objects.get(order_id=order_id).status == Payment.Status.VOIDED
    assert Reservation.objects.get(order_id=order_id).status == Reservation.Status.CANCELLED
    assert OutboxMessage.objects.count() == 0


def test_poison_messages_become_dead_letters_and_never_block_the_queue(processes, quiet_broker):
    valid_order = str(uuid.uuid4())
    ids = {reason: str(uuid.uuid4()) for reason in ["undecodable", "unknown", "version", "invalid", "valid"]}
    queue = "payments_queue"
    publish_raw(
        queue,
        b"\xff\xfe{not json",
        properties={"message_id": ids["undecodable"]},
        headers=headers("orders.order.created"),
        exchange="",
    )
    publish_raw(
        queue,
        json.dumps(order_created(str(uuid.uuid4()))).encode(),
        headers=headers("orders.order.created"),
        exchange="",
    )
    send("orders.order.exploded", {"order_id": str(uuid.uuid4())}, ids["unknown"], queue=queue)
    send("orders.order.created", order_created(str(uuid.uuid4())), ids["version"], queue=queue, schema_version=99)
    send("orders.order.created", order_created(str(uuid.uuid4()), total="-5"), ids["invalid"], queue=queue)
    send("orders.order.created", order_created(valid_order), ids["valid"], queue=queue)

    result = processes.run("run_consumers", "payments", "--once")

    assert result.returncode == 0, result.stderr
    letters = {(d.message_id, d.reason) for d in DeadLetter.objects.filter(consumer="payments")}
    assert letters == {
        (ids["undecodable"], "undecodable_body"),
        ("", "missing_message_id"),
        (ids["unknown"], "unknown_event_type"),
        (ids["version"], "unsupported_schema_version"),
        (ids["invalid"], "invalid_payload"),
    }
    undecodable = DeadLetter.objects.get(message_id=ids["undecodable"])
    assert bytes(undecodable.body) == b"\xff\xfe{not json"
    assert undecodable.headers["event_type"] == "orders.order.created"
    # the gateway worker (started with the consumer) charges the valid one
    wait_until(lambda: ledger(valid_order) == [("charge", Decimal("10.00"))], timeout=30, message="the valid charge")
    assert not InboxMessage.objects.filter(message_id__in=[ids[k] for k in ids if k != "valid"]).exists()


def test_a_handler_that_keeps_failing_is_retried_then_dead_lettered(processes, quiet_broker):
    # given an order whose payment row another session holds for the whole test, and a healthy one
    failing, healthy = str(uuid.uuid4()), str(uuid.uuid4())
    send("orders.order.created", order_created(failing), str(uuid.uuid4()))
    send("orders.order.created", order_created(healthy), str(uuid.uuid4()))
    fast_retries = {
        "CONSUMER_RETRY_DELAYS": "0.2,0.4",
        "CONSUMER_MAX_ATTEMPTS": "3",
        "WORKER_LOCK_TIMEOUT": "0.5",
        "LOG_FORMAT": "json",
    }

    # when the payments consumer runs
    port = free_port()
    with payment_row_held(failing):
        metrics_port = ("--metrics-port", str(port))
        consumer = processes.start("consumers", "run_consumers", "payments", *metrics_port, env=fast_retries)
        wait_until(lambda: DeadLetter.objects.filter(consumer="payments").exists(), timeout=30, message="a dead letter")
        # The consumer stores the dead letter, acks, and only then counts: wait until it has counted
        # its four deliveries (the healthy one, the failing one's three).
        counted = read_until(
            lambda: outcomes_counted(port),
            lambda counts: sum(counts.values()) >= 4,
            timeout=30,
            what="the consumer's counts of its four deliveries",
        )
        processes.stop(consumer)

    # then two retries, and the third delivery became a dead letter: counted as such, not as a retry
    assert counted == {"handled": 1, "retry": 2, "dead_letter": 1}

    letter = DeadLetter.objects.get(consumer="payments")
    assert letter.reason == "handler_error"
    assert letter.attempts == 3
    assert letter.first_failed_at < letter.last_failed_at
    assert "lock timeout" in letter.error
    assert letter.routing_key == "orders.order.created"
    assert Payment.objects.get(order_id=failing).status == Payment.Status.NEW  # nothing changed
    wait_until(lambda: ledger(healthy) == [("charge", Decimal("10.00"))], timeout=30, message="the healthy charge")
    assert ledger(failing) == []


def test_what_rabbitmq_dead_letters_is_moved_to_the_dead_letter_table(processes, quiet_broker):
    message_id = str(uuid.uuid4())
    # As RabbitMQ leaves a message that hit the quorum queue's delivery limit.
    publish_raw(
        "payments_queue_dead_letters",
        json.dumps(order_created(str(uuid.uuid4()))).encode(),
        properties={"message_id": message_id},
        headers={
            **headers("orders.order.created"),
            "x-death": [
                {
                    "count": 20,
                    "reason": "delivery_limit",
                    "queue": "payments_queue",
                    "exchange": "ecommerce_events",
                    "routing-keys": ["orders.order.created"],
                }
            ],
        },
        exchange="",
    )

    result = processes.run("run_consumers", "payments", "--once")

    assert result.returncode == 0, result.stderr
    letter = DeadLetter.objects.get()
    assert (letter.consumer, letter.message_id, letter.reason) == ("payments", message_id, "broker_delivery_limit")
    assert (letter.routing_key, letter.attempts) == ("orders.order.created", 20)
    assert not InboxMessage.objects.filter(message_id=message_id).exists()


def test_heartbeats_keep_the_connection_alive_through_a_slow_handler(processes, quiet_broker):
    """A handler that waits 9 s (for a row another session holds) with 2 s heartbeats: without
    heartbeats during the handler RabbitMQ would drop the connection, the ack would fail and the
    message would come back."""
    order_id = str(uuid.uuid4())
    send("orders.order.created", order_created(order_id), str(uuid.uuid4()))

    started = time.monotonic()
    with payment_row_held(order_id, release_after=9):
        result = processes.run(
            "run_consumers",
            "payments",
            "--once",
            env={"BROKER_HEARTBEAT": "2", "WORKER_LOCK_TIMEOUT": "30", "LOG_FORMAT": "json"},
        )

    assert result.returncode == 0, result.stderr
    lines = log_lines(result.stderr)
    assert [
        line["event"]
        for line in lines
        if line["event"] in ("handled", "duplicate: already handled, acked without effect")
    ] == ["handled"]
    assert not [line for line in lines if line["event"].startswith("broker unavailable")]
    assert time.monotonic() - started >= 9  # the handler did wait for the row
    wait_until(lambda: ledger(order_id) == [("charge", Decimal("10.00"))], timeout=30, message="the charge")
