"""A broker user per context (BROKER_PRODUCERS, manage.py broker_permissions --apply) on this
project's RabbitMQ: RabbitMQ refuses a context's user another context's routing keys, another user's
user_id and another context's queue. What it cannot refuse (a publish straight into a queue) the
consumer refuses as ``unauthenticated_producer``: the bus's own test,
packages/django-reliable-messaging/tests/test_broker_producers.py."""

import json
import os
import uuid

import amqp
import pytest
from reliable_messaging._declarations import installed, names

from faultlib.faults import rabbitmqctl
from faultlib.fixtures import ALL_DATABASES

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

CONTEXTS = tuple(names(installed()))  # a broker user for each, a context added later too
PASSWORD = "secret-for-tests"


@pytest.fixture
def users(process_env):
    """One broker user per context, with the permissions the command applies, removed afterwards."""
    vhost = os.environ["TEST_BROKER_VHOST"]
    names = {context: f"{vhost}_{context}" for context in CONTEXTS}
    for name in names.values():
        rabbitmqctl("add_user", name, PASSWORD)
    producers = ",".join(f"{context}={name}" for context, name in names.items())
    try:
        yield names, producers, vhost
    finally:
        for name in names.values():
            rabbitmqctl("delete_user", name, check=False)


def url(user: str, vhost: str) -> str:
    return f"amqp://{user}:{PASSWORD}@127.0.0.1:5672/{vhost}"


def publish_as(user: str, vhost: str, routing_key: str, body: dict, **properties):
    """Publish with py-amqp as ``user`` (confirmed); the broker's refusal is raised."""
    with amqp.Connection("127.0.0.1:5672", userid=user, password=PASSWORD, virtual_host=vhost) as conn:
        channel = conn.channel()
        headers = {"event_type": routing_key, "schema_version": 1}
        message = amqp.Message(json.dumps(body).encode(), application_headers=headers, delivery_mode=2, **properties)
        channel.basic_publish_confirm(message, exchange="ecommerce_events", routing_key=routing_key, confirm_timeout=10)


def test_each_context_user_publishes_and_reads_only_its_own(processes, quiet_broker, users):
    names, producers, vhost = users
    applied = processes.run("broker_permissions", "--apply", env={"BROKER_PRODUCERS": producers})
    assert applied.returncode == 0, applied.stderr
    assert (
        f"rabbitmqctl set_topic_permissions -p {vhost} {names['payments']} ecommerce_events '^(payments)\\.' '.*'"
        in (applied.stdout)
    )
    order_id = str(uuid.uuid4())
    payments = names["payments"]

    # the broker refuses another context's routing key, and a user_id that is not the connection's
    with pytest.raises(amqp.exceptions.AccessRefused, match="orders.order.created"):
        publish_as(payments, vhost, "orders.order.created", {"order_id": order_id}, user_id=payments)
    with pytest.raises(amqp.exceptions.PreconditionFailed, match="user_id property set to"):
        publish_as(payments, vhost, "payments.payment.succeeded", {"order_id": order_id}, user_id=names["orders"])
    # and another context's queue to read
    with amqp.Connection("127.0.0.1:5672", userid=payments, password=PASSWORD, virtual_host=vhost) as conn:
        with pytest.raises(amqp.exceptions.AccessRefused, match="orders_queue"):
            conn.channel().basic_get("orders_queue")
