"""Hostile messages, published with py-amqp itself (exact header types), into the queues of the
consumers the Procfile runs, on PostgreSQL and RabbitMQ: each becomes a dead letter with its
reason, neither consumer process stops, the order's timeline records nothing of them, and the next
genuine order confirms (issue 26, rows 2, 5). Every row against one consumer (x-attempt, x-death,
counts past a column, a reused message id) is the bus's own test:
packages/django-reliable-messaging/tests/test_hostile_headers.py."""

import json
import uuid
from decimal import Decimal

import pytest
from django.test import Client
from reliable_messaging.models import DeadLetter, EventLogEntry

from faultlib.fixtures import ALL_DATABASES
from faultlib.hostile import deeper_recursion
from faultlib.hostile import send as send_exact
from faultlib.load import order_created_payload
from faultlib.processes import wait_until
from faultlib.saga import checkout, ledger, seed_catalog, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

FAST_RETRIES = {"CONSUMER_RETRY_DELAYS": "0.2", "CONSUMER_MAX_ATTEMPTS": "3"}


@pytest.fixture
def procfile_consumers(processes, quiet_broker):
    """The relay and the Procfile's two consumer processes."""
    processes.start("relay", "run_outbox_relay")
    consumers = [
        processes.start("consumers", "run_consumers", "--except", "orders,events", env=FAST_RETRIES),
        processes.start("orders-consumers", "run_consumers", "orders", "events", env=FAST_RETRIES),
    ]
    seed_catalog()
    return consumers


def send(queue: str, payload, *, body: bytes | None = None, **fields) -> str:
    """A payload (or raw ``body``) into ``queue``, exactly as given (faultlib.hostile.send)."""
    return send_exact(queue, body if body is not None else json.dumps(payload).encode(), **fields)


def letters() -> set[tuple[str, str, str]]:
    return set(DeadLetter.objects.values_list("consumer", "message_id", "reason"))


def test_hostile_headers_and_bodies_are_dead_letters_and_every_consumer_keeps_consuming(procfile_consumers):
    client = Client()
    genuine = checkout(client, [{"sku": "WIDGET", "quantity": 1}])
    wait_terminal([genuine["id"]])
    expected: set[tuple[str, str, str]] = set()

    # row 2: 100,000 [ into the queues of both processes
    for consumer in ("payments", "events"):
        expected.add((consumer, send(f"{consumer}_queue", None, body=b"[" * 100_000), "invalid_payload"))
    # properties py-amqp cannot decode (it raised inside drain_events): a message id that is not
    # UTF-8, headers nested 3,000 deep
    send("payments_queue", order_created_payload(), message_id=b"\xff\xfe")
    deep: list = []
    for _ in range(3000):
        deep = [deep]
    with deeper_recursion():  # py-amqp encodes it recursively, as it decodes it
        send("events_queue", order_created_payload(), **{"x-deep": deep})
    # row 5: an instant in year 10000, about a real order, to the consumers that would record it
    far = {"order_id": genuine["id"], "amount": "19.99", "currency": "USD", "payment_id": str(uuid.uuid4())}
    for consumer in ("orders", "events"):
        message_id = send(
            f"{consumer}_queue", far, event_type="payments.payment.succeeded", occurred_at="9999-12-31T23:59:59-14:00"
        )
        expected.add((consumer, message_id, "invalid_headers"))
    # the two whose properties could not be decoded have no message id: they are rows of their own
    expected |= {("payments", "", "invalid_headers"), ("events", "", "invalid_headers")}
    wait_until(lambda: len(letters()) >= len(expected), timeout=60, message=f"{len(expected)} dead letters")
    assert letters() == expected
    undecodable = DeadLetter.objects.filter(message_id="").values_list("consumer", "error")
    assert sorted(undecodable) == [
        ("events", "its properties could not be decoded: RecursionError: maximum recursion depth exceeded while "
         "calling a Python object"),
        ("payments", "its properties could not be decoded: UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff "
         "in position 0: invalid start byte"),
    ]  # fmt: skip
    assert [p.poll() for p in procfile_consumers] == [None, None]
    # nothing of the hostile messages took effect: one charge of the genuine order, its page and
    # its timeline as they were
    assert ledger(genuine["id"]) == [("charge", Decimal("19.99"))]
    assert not EventLogEntry.objects.filter(occurred_at__year__gt=3000).exists()
    page = client.get(f"/api/orders/{genuine['id']}/")
    assert (page.status_code, page.json()["status"]) == (200, "CONFIRMED")

    # and the next genuine order goes through the same processes
    after = checkout(client, [{"sku": "WIDGET", "quantity": 2}])
    wait_terminal([after["id"]])
    assert client.get(f"/api/orders/{after['id']}/").json()["status"] == "CONFIRMED"
    assert ledger(after["id"]) == [("charge", Decimal("39.98"))]
    assert [p.poll() for p in procfile_consumers] == [None, None]
