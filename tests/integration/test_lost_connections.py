"""A database connection lost under a consumer is no fault of the message that finds out.

A backend terminated while its connection is idle (``pg_terminate_backend``, a failover, a
restart) is only found out by the connection's next query. The message that runs it must be
decided again on a new connection, not charged an attempt of its retry budget: three such
losses used to dead-letter a payment whose order then stayed PENDING until its deadline.
"""

import json
import logging
import uuid

import pytest
from django.db import connections
from reliable_messaging import _dispatch as dispatch
from reliable_messaging._dispatch import Delivery, Outcome, decide, decide_batch
from reliable_messaging._lifecycle import drop_broken_db_connections
from reliable_messaging.models import InboxMessage

from fake_gateway.models import GatewayOperation
from faultlib.load import order_created_payload
from payments.gateway_calls import run_due_calls
from payments.models import Payment
from tests.conftest import ALL_DATABASES

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

EVENT = "orders.order.created"


def created(order_id: str) -> Delivery:
    return Delivery(
        consumer="payments",
        body=json.dumps(order_created_payload(order_id, payment_token="tok_visa")).encode(),
        properties={"message_id": str(uuid.uuid4()), "correlation_id": order_id},
        headers={"event_type": EVENT, "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"},
        routing_key=EVENT,
    )


def terminate_backend_of(alias: str) -> None:
    """End ``alias``'s backend from another session, as an operator or a failover would."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        [pid] = cursor.fetchone()
    with connections["gateway" if alias == "default" else "default"].cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        assert cursor.fetchone() == (True,)


def charges() -> list[str]:
    return list(GatewayOperation.objects.filter(kind="charge").values_list("order_id", flat=True).order_by("order_id"))


def charged_once(orders: list[str]) -> bool:
    """Each order's charge recorded in flight once; the gateway worker then makes it once."""
    in_flight = Payment.objects.filter(order_id__in=orders, status=Payment.Status.CHARGING).count()
    run_due_calls()
    return (
        in_flight == len(orders)
        and Payment.objects.filter(order_id__in=orders, status=Payment.Status.CHARGED).count() == len(orders)
        and [o for o in charges() if o in orders] == sorted(orders)
    )


def test_a_backend_terminated_while_idle_costs_a_lone_message_nothing(caplog):
    # given the payments consumer's connection, open and idle between two messages
    decide_batch([created(str(uuid.uuid4()))])
    # when it is terminated
    terminate_backend_of("default")

    # and the next message arrives alone
    drop_broken_db_connections()
    order_id = str(uuid.uuid4())
    with caplog.at_level(logging.INFO, logger="reliable_messaging.dispatch"):
        [decision] = decide_batch([created(order_id)])

    # then it is decided again at once on a new connection: handled, charged once, no retry
    assert decision.outcome is Outcome.HANDLED, decision.error
    assert charged_once([order_id])
    assert [r.getMessage() for r in caplog.records if r.name == "reliable_messaging.dispatch"] == [
        "database connection lost: decided again at once"
    ]


def test_a_backend_terminated_while_idle_costs_a_batch_nothing():
    # given the payments consumer's connection, open and idle between two batches
    decide_batch([created(str(uuid.uuid4()))])
    # when it is terminated
    terminate_backend_of("default")

    # and the next batch of three payments arrives (the consumer drops known-broken connections first)
    drop_broken_db_connections()
    batch = [created(str(uuid.uuid4())) for _ in range(3)]
    decisions = decide_batch(batch)

    # then every member is handled, each order charged exactly once, and nothing is left to retry
    assert [d.outcome for d in decisions] == [Outcome.HANDLED] * 3, [d.error for d in decisions]
    orders = sorted(json.loads(d.body)["order_id"] for d in batch)
    assert charged_once(orders)
    assert InboxMessage.objects.filter(consumer="payments").count() == 4


def test_a_connection_lost_again_on_the_new_connection_is_retried_later(monkeypatch):
    # given a database whose every new connection is lost at its first query (a server restarting)
    lost = []

    def lose_it(*args, **kwargs):
        lost.append(1)
        terminate_backend_of("default")
        return original(*args, **kwargs)

    original = dispatch.inbox_claim
    monkeypatch.setattr(dispatch, "inbox_claim", lose_it)
    delivery = created(str(uuid.uuid4()))

    # when a message is decided
    decision = decide(
        delivery.consumer,
        body=delivery.body,
        properties=delivery.properties,
        headers=delivery.headers,
        routing_key=delivery.routing_key,
    )

    # then it is tried twice, the second time on a new connection, and then left for a retry:
    # never a loop, and the database (which answers) is not reported down
    assert len(lost) == 2
    assert decision.outcome is Outcome.RETRY
    assert decision.error.startswith("OperationalError"), decision.error
    assert not Payment.objects.exists()


@pytest.fixture
def dedicated_connections(monkeypatch):
    """The workers' connections (``use_dedicated_connections``): no pool, so a connection closed is
    gone rather than handed back, session state and all, by the test process's pool."""
    for alias in ("default", "gateway"):
        settings_dict = connections[alias].settings_dict
        connections[alias].close()
        monkeypatch.setitem(
            settings_dict, "OPTIONS", {k: v for k, v in settings_dict["OPTIONS"].items() if k != "pool"}
        )
    yield
    connections.close_all()


def make_read_only(alias: str) -> None:
    """``alias``'s session refuses writes from now on (SQLSTATE 25006), as a demoted primary does."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")


@pytest.mark.parametrize("size", [1, 3])
def test_a_write_refused_as_read_only_is_decided_again_on_a_new_connection(size, caplog, dedicated_connections):
    # given the payments consumer's connection, now on a server that refuses writes (a failover
    # left it on a standby)
    decide_batch([created(str(uuid.uuid4()))])
    make_read_only("default")

    # when the next message (or batch) arrives
    batch = [created(str(uuid.uuid4())) for _ in range(size)]
    with caplog.at_level(logging.INFO, logger="reliable_messaging.dispatch"):
        decisions = decide_batch(batch)

    # then it is decided again at once on a new connection, as after a lost one: handled, charged
    # once, not a handler error (never a retry that a failover could turn into a dead letter)
    assert [d.outcome for d in decisions] == [Outcome.HANDLED] * size, [d.error for d in decisions]
    orders = sorted(json.loads(d.body)["order_id"] for d in batch)
    connections.close_all()  # the gateway worker's process has a connection of its own
    assert charged_once(orders)
    if size == 1:
        assert [r.getMessage() for r in caplog.records if r.name == "reliable_messaging.dispatch"] == [
            "database connection lost: decided again at once"
        ]
