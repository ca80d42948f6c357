"""A real payments consumer whose database backends are terminated, and one fed a dead letter
the database could not hold: neither costs a message its retries, neither stalls the consumer.

Both used to: three terminations dead-lettered a payment (each one charged to the message that
found the dead connection, the gateway's connection a second time), which left its order
PENDING until its deadline; and a NUL in a message id paused the consumer for ever, as if the
database were down.
"""

import json
import uuid

import pytest
from reliable_messaging.models import DeadLetter, InboxMessage

from fake_gateway.models import GatewayOperation
from faultlib.broker import publish_raw
from faultlib.faults import terminate_database_backends
from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import broker_queue_depths
from faultlib.load import order_created_payload
from faultlib.processes import wait_until
from payments.models import Payment
from tests.support import fault_fixtures

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
process_env = fault_fixtures.process_env  # the processes connect as saga_fault_test: terminations find them

LOST = "database connection lost: decided again at once"
PAUSED = "database unavailable: consuming paused until it is back"


def send_created(order_id: str, message_id: str | None = None) -> str:
    message_id = message_id or str(uuid.uuid4())
    publish_raw(
        "payments_queue",
        json.dumps(order_created_payload(order_id)).encode(),
        properties={"message_id": message_id, "correlation_id": order_id},
        headers={"event_type": "orders.order.created", "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"},
        exchange="",
    )
    return message_id


def log_events(path) -> list[str]:
    return [json.loads(line)["event"] for line in path.read_text(errors="replace").splitlines() if line.startswith("{")]


def handled(message_id: str) -> bool:
    return InboxMessage.objects.filter(consumer="payments", message_id=message_id).exists()


@pytest.fixture
def payments_consumer(processes, quiet_broker):
    """One payments consumer with the fault scenarios' budget; its JSON log's events."""
    processes.start(
        "consumers", "run_consumers", "payments", env={"CONSUMER_RETRY_DELAYS": "2", "CONSUMER_MAX_ATTEMPTS": "5"}
    )
    log = processes.procs[-1][2]
    wait_until(lambda: "consuming" in log_events(log), timeout=30, message="the consumer to start")
    return processes.procs[-1][1], lambda: log_events(log)


def test_terminated_backends_cost_no_message_an_attempt(processes, payments_consumer):
    consumer, events = payments_consumer
    orders = []
    for round_ in range(3):
        # given the consumer's connection, open after a payment (and the gateway worker's, and the
        # fake gateway's)
        order_id = str(uuid.uuid4())
        message_id = send_created(order_id)
        wait_until(lambda m=message_id: handled(m), timeout=30, message=f"payment {round_} handled")
        orders.append(order_id)

        # when its backends are terminated while idle
        terminated = terminate_database_backends()  # the consumer's, and the worker's when it is connected
        assert int(terminated.split()[1]) >= 1, terminated

        # then the next payment finds the dead connection, and is decided again at once: handled
        order_id = str(uuid.uuid4())
        message_id = send_created(order_id)
        wait_until(lambda m=message_id: handled(m), timeout=30, message=f"payment {round_} after the cut")
        orders.append(order_id)

    # every payment charged exactly once (by the gateway worker, which outlived the cuts too), none
    # retried nor dead-lettered, no pause for an outage
    charged = Payment.objects.filter(order_id__in=orders, status=Payment.Status.CHARGED)
    wait_until(lambda: charged.count() == 6, timeout=60, message="6 charges recorded")
    assert consumer.poll() is None
    assert processes.gateway_calls.poll() is None
    log = events()
    assert [e for e in log if e.startswith("handler failed")] == []
    assert log.count(LOST) == 3
    assert PAUSED not in log
    assert not DeadLetter.objects.exists()
    charged = list(GatewayOperation.objects.filter(kind="charge").values_list("order_id", flat=True))
    assert sorted(charged) == sorted(orders)


def test_a_dead_letter_with_a_nul_in_its_message_id_is_stored_and_the_consumer_goes_on(payments_consumer):
    consumer, events = payments_consumer

    # when a message it can never handle arrives, with a message id PostgreSQL text cannot hold
    poison_id = f"nul\x00{uuid.uuid4()}"
    publish_raw(
        "payments_queue",
        b"{}",
        properties={"message_id": poison_id},
        headers={"event_type": "orders.order.exploded", "schema_version": 1},
        exchange="",
    )
    # and then an ordinary payment
    order_id = str(uuid.uuid4())
    message_id = send_created(order_id)

    # then the dead letter is stored (refused at the edge: no inbox could store the id), the NUL
    # shown, and the payment is handled after it (in one batch, the dead letter is stored after
    # the batch commits the payment: wait for both)
    wait_until(
        lambda: handled(message_id) and DeadLetter.objects.exists(),
        timeout=30,
        message="the poison message's dead letter and the payment after it",
    )
    letter = DeadLetter.objects.get()
    assert (letter.consumer, letter.message_id, letter.reason) == (
        "payments",
        poison_id.replace("\x00", "\\x00"),
        "invalid_headers",
    )
    assert consumer.poll() is None
    assert PAUSED not in events()
    charged = Payment.objects.filter(order_id=order_id, status=Payment.Status.CHARGED)
    wait_until(lambda: charged.count() == 1, timeout=30, message="the charge recorded")
    depths = broker_queue_depths()
    assert (depths["payments_queue"], depths["payments_queue_dead_letters"]) == (0, 0)
