"""The gateway worker records the answers that came in together in one transaction
(payments.gateway_calls.record_all): the charges' answers with one lock and one update for the
lot, each with its own event under its own cause, beside the other outcomes."""

import uuid
from decimal import Decimal

import pytest
from reliable_messaging.models import OutboxMessage

from payments.gateway import GatewayResult
from payments.gateway_calls import Answer, as_call, record_all
from payments.models import Payment

pytestmark = pytest.mark.django_db(transaction=True)


def charging(order_id: uuid.UUID, *, refund_reason: str = "") -> Payment:
    return Payment.objects.create(
        order_id=order_id,
        status=Payment.Status.CHARGING,
        amount=Decimal("12.50"),
        currency="USD",
        token="tok_visa",
        items=[{"sku": "WIDGET", "quantity": 1, "unit_price": "12.50"}],  # what its events carry
        refund_reason=refund_reason,
        causes={"charge": {"message_id": f"msg-{order_id}"}},
    )


def test_answers_that_came_together_are_recorded_each_once_under_its_own_cause():
    ok, declined, cancelled, late, recorded_before = sorted(uuid.uuid4() for _ in range(5))
    for order_id in (ok, declined, late, recorded_before):
        charging(order_id)
    charging(cancelled, refund_reason="cancelled")
    calls = {p.order_id: as_call(p) for p in Payment.objects.all()}
    Payment.objects.filter(order_id=recorded_before).update(status=Payment.Status.CHARGED, charge_id="ch_first")

    record_all(
        [
            Answer(calls[ok], GatewayResult(True, "ch_ok", Decimal("12.50"), "USD")),
            Answer(calls[declined], GatewayResult(False, "", Decimal("12.50"), "USD", "card_declined")),
            Answer(calls[cancelled], GatewayResult(True, "ch_cancelled", Decimal("12.50"), "USD")),
            Answer(calls[late], retry_in=2.0),
            Answer(calls[recorded_before], GatewayResult(True, "ch_again", Decimal("12.50"), "USD")),
        ]
    )

    payments = {p.order_id: p for p in Payment.objects.all()}
    assert {o: (p.status, p.charge_id, p.decline_code, p.token) for o, p in payments.items()} == {
        ok: (Payment.Status.CHARGED, "ch_ok", "", ""),
        declined: (Payment.Status.DECLINED, "", "card_declined", ""),
        cancelled: (Payment.Status.REFUNDING, "ch_cancelled", "", ""),  # its refund is due at once
        late: (Payment.Status.CHARGING, "", "", "tok_visa"),  # postponed, its token kept for the call
        recorded_before: (Payment.Status.CHARGED, "ch_first", "", "tok_visa"),  # another worker's, left
    }
    assert payments[cancelled].call_attempts == 0
    assert payments[late].call_due_at > payments[ok].updated_at
    events = OutboxMessage.objects.order_by("aggregate_id")
    assert [(e.event_type, e.aggregate_id, e.causation_id) for e in events] == sorted(
        [
            ("payments.payment.succeeded", str(ok), f"msg-{ok}"),
            ("payments.payment.failed", str(declined), f"msg-{declined}"),
            ("payments.payment.succeeded", str(cancelled), f"msg-{cancelled}"),
        ],
        key=lambda e: e[1],
    )
