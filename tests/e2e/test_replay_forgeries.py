"""Issue 43, item 3: replay checks what it replays. With a broker user per context
(BROKER_PRODUCERS), a charge forged by another context's user into payments' queue (through the
default exchange, its delay queue, or straight into its dead-letter queue) is a dead letter;
``dead_letters replay --all`` republishes under payments' own user, which the consumer accepts,
so it refuses the forged one, naming its recorded producer and the expected one, and changes
nothing for it, while a genuine dead letter beside it is replayed and charged once. Real broker users
of this project's RabbitMQ; the replay check itself (command and admin action) is the package's test:
packages/django-reliable-messaging/tests/test_replay_checks.py and test_message_admin.py."""

import json
import os
import uuid
from decimal import Decimal

import amqp
import pytest
from kombu import Queue
from reliable_messaging import _broker as broker
from reliable_messaging._declarations import installed, names
from reliable_messaging.models import DeadLetter, InboxMessage

from faultlib import broker as broker_support
from faultlib.faults import rabbitmqctl
from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import wait_until
from faultlib.saga import ledger

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

CONTEXTS = tuple(names(installed()))
PASSWORD = "replay-forgery-test"
# where the forger puts its message, and the dead letter it becomes there
ROUTES = {
    "queue": (lambda: "payments_queue", "unauthenticated_producer"),
    "delay_queue": (lambda: broker.retry_queue_name("payments", broker.DELAY_LADDER[0]), "unauthenticated_producer"),
    "dead_letter_queue": (lambda: broker.dead_letter_queue_name("payments"), "unauthenticated_producer"),
}


@pytest.fixture
def users():
    vhost = os.environ["TEST_BROKER_VHOST"]
    run = uuid.uuid4().hex[:6]
    users = {context: f"{vhost}_{run}_{context}" for context in CONTEXTS}
    for user in users.values():
        rabbitmqctl("add_user", user, PASSWORD)
    try:
        yield users, ",".join(f"{context}={user}" for context, user in users.items()), vhost
    finally:
        for user in users.values():
            rabbitmqctl("delete_user", user, check=False)


def order_created(order_id: str, amount: str) -> bytes:
    return json.dumps(
        {
            "order_id": order_id,
            "customer_id": "c",
            "total": amount,
            "currency": "USD",
            "items": [{"sku": "WIDGET", "quantity": 1, "unit_price": amount}],
            "payment_token": "tok_visa",
        }
    ).encode()


def publish_as(user: str, vhost: str, exchange: str, routing_key: str, body: bytes, **headers) -> str:
    """A confirmed publish as ``user``, its user_id set (RabbitMQ validates it); the message id."""
    message_id = str(uuid.uuid4())
    message = amqp.Message(
        body,
        application_headers={"event_type": "orders.order.created", "schema_version": 1, **headers},
        message_id=message_id,
        correlation_id=json.loads(body)["order_id"],
        user_id=user,
        delivery_mode=2,
        content_type="application/json",
    )
    with amqp.Connection("127.0.0.1:5672", userid=user, password=PASSWORD, virtual_host=vhost) as conn:
        conn.channel().basic_publish_confirm(message, exchange=exchange, routing_key=routing_key, confirm_timeout=10)
    return message_id


def queue_depth(name: str) -> int:
    with broker_support.connection() as conn:
        return Queue(name)(conn.default_channel).queue_declare(passive=True).message_count


@pytest.mark.parametrize("route", ROUTES)
def test_replay_refuses_a_forged_dead_letter_and_replays_a_genuine_one(processes, quiet_broker, users, route):
    from payments.models import Payment  # the context's own: the file collects without it
    from tests.support.locks import payment_row_held  # imports payments too

    users, producers, vhost = users
    applied = processes.run("broker_permissions", "--apply", env={"BROKER_PRODUCERS": producers})
    assert applied.returncode == 0, applied.stderr
    payments = {
        "CONTEXTS": "payments",
        "BROKER_URL": f"amqp://{users['payments']}:{PASSWORD}@127.0.0.1:5672/{vhost}",
        "BROKER_PRODUCERS": producers,
        "CONSUMER_MAX_ATTEMPTS": "1",  # the genuine one is a dead letter at its first failure
        "WORKER_LOCK_TIMEOUT": "0.5",
    }
    target, reason = ROUTES[route]
    # inventory's user charges 50.00 for an order nobody placed, into payments' queue by one route
    forged_order, genuine_order = str(uuid.uuid4()), str(uuid.uuid4())
    limit = {"x-death": [{"count": 20, "reason": "delivery_limit", "queue": "payments_queue"}]}
    forged = publish_as(
        users["inventory"], vhost, "", target(), order_created(forged_order, "50.00"),
        **(limit if route == "dead_letter_queue" else {}),
    )  # fmt: skip
    # and orders' user publishes a genuine order, whose handler fails: its payment row is held
    genuine = publish_as(users["orders"], vhost, "ecommerce_events", "orders.order.created",
                         order_created(genuine_order, "10.00"))  # fmt: skip
    if route == "delay_queue":
        wait_until(lambda: queue_depth(target()) == 0, timeout=30, message="the delay queue's TTL")
    with payment_row_held(genuine_order):
        consumed = processes.run("run_consumers", "payments", "--once", env=payments)
    assert consumed.returncode == 0, consumed.stderr
    letters = {d.message_id: d for d in DeadLetter.objects.all()}
    assert {(m, d.reason) for m, d in letters.items()} == {(forged, reason), (genuine, "handler_error")}
    assert {m: d.properties["user_id"] for m, d in letters.items()} == {
        forged: users["inventory"],
        genuine: users["orders"],
    }

    replay = processes.run("dead_letters", "replay", "--all", env=payments)

    assert replay.returncode == 1, replay.stderr
    said = {
        forged: (
            f"NOT replayed: its producer is not accepted: orders.order.created belongs to orders, whose broker "
            f"user is '{users['orders']}'; this message's user_id is '{users['inventory']}' (recorded when it was "
            "dead-lettered)"
        ),
        genuine: "replayed",
    }
    ordered = sorted(letters.values(), key=lambda d: d.pk)
    assert replay.stdout.splitlines() == [f"{d.pk}\tpayments\t{d.message_id}\t{said[d.message_id]}" for d in ordered]
    # the forged one is left as it was, waiting
    letter = DeadLetter.objects.get(message_id=forged)
    assert (letter.reason, letter.replayed_at, letter.replay_count) == (reason, None, 0)

    consumed = processes.run("run_consumers", "payments", "--once", env=payments)
    assert consumed.returncode == 0, consumed.stderr
    wait_until(
        lambda: ledger(genuine_order) == [("charge", Decimal("10.00"))], timeout=30, message="the genuine charge"
    )
    assert ledger(forged_order) == []
    assert not Payment.objects.filter(order_id=forged_order).exists()
    assert list(InboxMessage.objects.values_list("message_id", flat=True)) == [genuine]
    assert DeadLetter.objects.get(message_id=forged).replayed_at is None
    assert DeadLetter.objects.get(message_id=genuine).replay_count == 1
