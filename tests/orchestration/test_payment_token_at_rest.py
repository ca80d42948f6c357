"""An orchestrated checkout driven through its whole saga in-process (faultlib.simulation's Bus
stands in for the relay and RabbitMQ): the orchestrator never receives the card token nor keeps
it in its saga; payments keeps it from orders.order.created (encrypted for payments alone) until
the charge command, charges it once, then forgets it. The choreography:
tests/integration/test_payment_token_at_rest.py."""

from decimal import Decimal

import pytest
from django.test import Client, override_settings
from reliable_messaging.models import OutboxMessage

import orchestrator.handlers
from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import wait_quiet
from faultlib.processes import wait_until
from faultlib.saga import checkout, ledger, seed_catalog, wait_terminal
from orchestrator.models import OrderSaga
from orders.models import Order
from payments.models import Payment
from tests.support.token_at_rest import (
    TOKEN,
    charges,  # noqa: F401 (a fixture)
    encrypted_token_of,
    logged_token_of,
    messages_holding,
    place,
    queued_on_the_broker,
    run_to_quiet,
    stocked_bus,
    tables_holding,
)

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


@pytest.fixture
def orchestrator_saw(monkeypatch) -> list[dict]:
    """The payloads of orders.order.created the orchestrator's handler received."""
    seen = []
    new_saga_of = orchestrator.handlers.new_saga_of

    def spied(event):
        seen.append(event.payload)
        return new_saga_of(event)

    monkeypatch.setattr(orchestrator.handlers, "new_saga_of", spied)
    return seen


@override_settings(SAGA_STYLE="orchestration")
def test_an_orchestrated_checkout_holds_the_token_clear_only_in_payments_until_the_charge(
    charges,  # noqa: F811
    orchestrator_saw,
):
    bus = stocked_bus()
    order_id = place(bus)
    sealed = encrypted_token_of(order_id)["$encrypted"]
    assert (sealed["for"], tables_holding(TOKEN)) == (["payments"], [])

    run_to_quiet(bus, gateway=False)  # reserved, the charge command handled; the call is not made
    assert OrderSaga.objects.get(key=order_id).state == "processing_payment"
    assert Payment.objects.get(order_id=order_id).status == "charging"
    assert tables_holding(TOKEN) == ["payments_payment"]
    assert [sorted(payload) for payload in orchestrator_saw] == [["items", "order_id", "saga_style", "total"]]
    assert "payment_token" not in OrderSaga.objects.get(key=order_id).data
    charge = OutboxMessage.objects.get(correlation_id=order_id, event_type="orchestrator.payment.charge")
    assert (charge.schema_version, sorted(charge.payload)) == (2, ["amount", "currency", "items", "key", "order_id"])

    run_to_quiet(bus)
    assert Order.objects.get(pk=order_id).status == "CONFIRMED"
    assert OrderSaga.objects.get(key=order_id).state == "completed"
    assert charges == [(order_id, TOKEN)]
    assert tables_holding(TOKEN) == []
    assert len(bus.outcomes) >= 9 and bus.pending == []
    assert messages_holding(bus, TOKEN) == []
    assert logged_token_of(order_id) == "****"  # masked (SENSITIVE_FIELDS), ciphertext or not


def test_on_rabbitmq_the_messages_waiting_for_payments_hold_no_clear_token(processes, quiet_broker, settings):
    """A real relay and consumers; payments' consumer starts late, so its queue holds the order and
    the charge command meanwhile."""
    settings.SAGA_STYLE = "orchestration"
    processes.start("relay", "run_outbox_relay")
    processes.start("others", "run_consumers", "--except", "payments")
    seed_catalog()
    order_id = checkout(Client(), [{"sku": "WIDGET", "quantity": 2}], token=TOKEN)["id"]
    wait_until(
        lambda: OrderSaga.objects.filter(key=order_id, state="processing_payment").exists(),
        timeout=60,
        message="the charge command sent",
    )
    wait_until(lambda: len(queued_on_the_broker()) == 2, timeout=30, message="payments' two messages queued")

    queued = queued_on_the_broker()
    assert sorted((queue, key) for queue, key, _ in queued) == [
        ("payments_queue", "orchestrator.payment.charge"),
        ("payments_queue", "orders.order.created"),
    ]
    assert [key for _, key, body in queued if TOKEN in body] == []
    assert [key for _, key, body in queued if '"$encrypted"' in body] == ["orders.order.created"]
    assert tables_holding(TOKEN) == []

    processes.start("payments", "run_consumers", "payments")
    wait_terminal([order_id], timeout=90)
    wait_quiet(timeout=90, what="the saga's last messages")
    assert Order.objects.get(pk=order_id).status == "CONFIRMED"
    assert ledger(order_id) == [("charge", Decimal("39.98"))]
    assert (tables_holding(TOKEN), queued_on_the_broker()) == ([], [])
