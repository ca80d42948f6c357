"""An orchestrated checkout driven through its whole saga in-process (faultlib.simulation's Bus
stands in for the relay and RabbitMQ): the orchestrator never receives the card token nor keeps
it in its saga; payments keeps it from orders.order.created (encrypted for payments alone) until
the charge command, charges it once, then forgets it. The choreography:
tests/integration/test_payment_token_at_rest.py."""

import pytest
from django.test import override_settings
from reliable_messaging.models import OutboxMessage

import orchestrator.handlers
from orchestrator.models import OrderSaga
from orders.models import Order
from payments.models import Payment
from tests.conftest import ALL_DATABASES
from tests.support.token_at_rest import (
    TOKEN,
    charges,  # noqa: F401 (a fixture)
    encrypted_token_of,
    logged_token_of,
    messages_holding,
    place,
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
    assert [sorted(payload) for payload in orchestrator_saw] == [
        ["customer_id", "items", "order_id", "saga_style", "total"]
    ]
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
