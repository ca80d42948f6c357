"""Operators' tools on the shop: a dead letter of payments replayed twice, the second time under a
new id, charges once (the payment's own state stops a second charge). The tools themselves
(dead_letters list/show/replay/purge, parked rows, retention) are the bus's own tests:
packages/django-reliable-messaging/tests/test_dead_letter_commands.py and test_outbox_retention.py."""

import json
import uuid
from decimal import Decimal

import pytest
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging.models import InboxMessage

from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import wait_until
from faultlib.saga import ledger


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_a_dead_letter_replayed_again_under_a_new_id_charges_once(processes, quiet_broker):
    from payments.models import Payment  # the context's own: the file collects without it

    order_id, message_id = str(uuid.uuid4()), str(uuid.uuid4())
    payload = {
        "order_id": order_id,
        "customer_id": "c",
        "total": "12.50",
        "currency": "USD",
        "items": [{"sku": "WIDGET", "quantity": 1, "unit_price": "12.50"}],
        "payment_token": "tok_visa",
    }
    letter = dead_letter_record(
        consumer="payments",
        body=json.dumps(payload).encode(),
        properties={"message_id": message_id, "correlation_id": order_id},
        headers={"event_type": "orders.order.created", "schema_version": 1, "x-attempt": 5},
        routing_key="orders.order.created",
        reason="handler_error",
        error="TransientError: gateway: the gateway is unavailable",
        attempts=5,
    )

    replay = processes.run("dead_letters", "replay", str(letter.pk))
    assert replay.returncode == 0, replay.stderr
    assert processes.run("run_consumers", "payments", "--once").returncode == 0
    charged = [("charge", Decimal("12.50"))]
    wait_until(lambda: ledger(order_id) == charged, timeout=30, message="the gateway worker's charge")

    # --new-id runs it again past the inbox; the payment's own state still stops a second charge.
    fresh = processes.run("dead_letters", "replay", str(letter.pk), "--new-id")
    assert fresh.returncode == 0, fresh.stdout
    assert processes.run("run_consumers", "payments", "--once").returncode == 0
    assert ledger(order_id) == charged
    assert InboxMessage.objects.filter(consumer="payments", correlation_id=order_id).count() == 2
    assert Payment.objects.get(order_id=order_id).status == Payment.Status.CHARGED
