"""A choreographed checkout driven through its whole saga in-process (faultlib.simulation's Bus
stands in for the relay and RabbitMQ): the card token is clear only in payments' own table, and
only until the charge; every other table and every message carries it encrypted for payments
alone, and payments charges it once. The orchestrated saga: tests/orchestration/test_payment_token_at_rest.py."""

import base64
import uuid
from contextlib import nullcontext
from decimal import Decimal

import pytest
from reliable_messaging.api import TransientError

from faultlib.fixtures import ALL_DATABASES
from orders.models import Order
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
NEW_KEY = base64.b64encode(b"the shop's key of 2026-11, 32 b.").decode()


def test_a_choreographed_checkout_holds_the_token_clear_only_in_payments_until_the_charge(charges):  # noqa: F811
    bus = stocked_bus()
    order_id = place(bus)

    sealed = encrypted_token_of(order_id)["$encrypted"]
    assert (sorted(sealed), sealed["for"], sealed["kid"]) == (["ct", "for", "kid"], ["payments"], "development")
    assert tables_holding(TOKEN) == []

    run_to_quiet(bus, gateway=False)  # payments recorded the charge in flight; the call is not made
    assert tables_holding(TOKEN) == ["payments_payment"]

    run_to_quiet(bus)
    assert Order.objects.get(pk=order_id).status == "CONFIRMED"
    assert charges == [(order_id, TOKEN)]
    assert tables_holding(TOKEN) == []  # payments forgets it once charged
    assert len(bus.outcomes) >= 8 and bus.pending == []
    assert messages_holding(bus, TOKEN) == []
    # the event log, a consumer not permitted, records the order without it
    assert logged_token_of(order_id) == "****"  # masked (SENSITIVE_FIELDS), ciphertext or not


def test_keys_rotate_with_orders_in_flight(charges, settings):  # noqa: F811
    keys = settings.MESSAGING["ENCRYPTION_KEYS"]
    bus = stocked_bus()
    before = place(bus)
    # the new key is listed last everywhere: it encrypts, the old one still decrypts
    settings.MESSAGING = {**settings.MESSAGING, "ENCRYPTION_KEYS": {**keys, "2026-11": NEW_KEY}}
    after = place(bus)

    assert [encrypted_token_of(o)["$encrypted"]["kid"] for o in (before, after)] == ["development", "2026-11"]
    run_to_quiet(bus)
    assert sorted(charges) == sorted([(before, TOKEN), (after, TOKEN)])
    assert [Order.objects.get(pk=o).status for o in (before, after)] == ["CONFIRMED", "CONFIRMED"]
    assert (tables_holding(TOKEN), messages_holding(bus, TOKEN)) == ([], [])


def test_a_charge_command_ahead_of_the_token_is_retried_and_a_refund_forgets_the_token():
    from payments.models import Payment
    from payments.services import ChargeRequest, payment_charge_ordered, payment_refund, payment_token_keep

    ordered, cancelled = uuid.uuid4(), uuid.uuid4()
    charge = ChargeRequest(ordered, Decimal("20.00"), "USD", "", [{"sku": "WIDGET", "quantity": 2}])
    with pytest.raises(TransientError, match="^orchestrator.payment.charge before the order's payment token came"):
        payment_charge_ordered([charge], turn=lambda n: nullcontext())
    assert Payment.objects.filter(order_id=ordered).exists() is False  # nothing changed

    payment_token_keep([(ordered, TOKEN)], turn=lambda n: nullcontext())
    payment_token_keep([(ordered, "tok_other")], turn=lambda n: nullcontext())  # a second event keeps the first
    payment_charge_ordered([charge], turn=lambda n: nullcontext())
    payment = Payment.objects.get(order_id=ordered)
    assert (payment.status, payment.token, payment.amount) == ("charging", TOKEN, Decimal("20.00"))

    payment_token_keep([(cancelled, TOKEN)], turn=lambda n: nullcontext())
    payment_refund(order_id=cancelled, reason="cancelled")  # the order ended before its charge command
    payment = Payment.objects.get(order_id=cancelled)
    assert (payment.status, payment.token, payment.refund_reason) == ("refunding", "", "cancelled")
