"""Cancellation, the saga deadline and compensation, whatever order the events arrive in.

These drive the consumers' dispatch in-process with hand-made deliveries, so every
interleaving is chosen by the test; the fault tests do the same with real processes.
"""

import json
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone
from reliable_messaging._dispatch import Outcome, decide
from reliable_messaging.models import OutboxMessage

from fake_gateway.in_process import gateway
from faultlib.fixtures import ALL_DATABASES
from faultlib.saga import ledger
from inventory.models import Product, Reservation
from inventory.services import product_upsert
from orders.models import Order, StorefrontProduct
from orders.services.checkout import Line, order_place
from orders.services.saga import orders_expire
from payments.gateway_calls import run_due_calls
from payments.models import Payment
from payments.services import charge_key

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


@pytest.fixture
def order():
    """A PENDING order for 2 x WIDGET at 10.00, with inventory holding 5."""
    product_upsert(sku="WIDGET", name="Widget", price=Decimal("10.00"), stock=5)
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("10.00"), available=5, version=1)
    return order_place(customer_id="c", lines=[Line("WIDGET", 2)], payment_token="tok_visa")


def deliver(consumer: str, row: OutboxMessage) -> Outcome:
    """Hand one outbox row to a consumer as the broker would; payments' gateway worker then makes
    the calls that are due, as the Procfile's ``gateway-calls`` would."""
    decision = decide(
        consumer,
        body=json.dumps(row.payload).encode(),
        properties={"message_id": str(row.event_id), "correlation_id": row.correlation_id},
        headers={"event_type": row.event_type, "schema_version": row.schema_version},
        routing_key=row.event_type,
    )
    if consumer == "payments":
        run_due_calls()
    return decision.outcome


def event(event_type: str, order_id=None) -> OutboxMessage:
    rows = OutboxMessage.objects.filter(event_type=event_type)
    if order_id:
        rows = rows.filter(correlation_id=str(order_id))
    [row] = rows
    return row


def cancel(order_id) -> int:
    return Client().post(f"/api/orders/{order_id}/cancel/").status_code


def stock() -> int:
    return Product.objects.get(sku="WIDGET").stock


def run_happy_path(order) -> None:
    assert deliver("payments", event("orders.order.created")) is Outcome.HANDLED
    for consumer in ("orders", "inventory"):  # orders notes the payment: only a paid order is confirmed
        assert deliver(consumer, event("payments.payment.succeeded")) is Outcome.HANDLED
    assert deliver("orders", event("inventory.stock.reserved")) is Outcome.HANDLED
    assert Order.objects.get(pk=order.pk).status == "CONFIRMED"


def test_cancelling_a_confirmed_order_refunds_and_releases_exactly_once(order):
    run_happy_path(order)
    assert stock() == 3

    assert cancel(order.pk) == 202
    cancelled = event("orders.order.cancelled")
    for consumer in ("payments", "inventory"):
        assert deliver(consumer, cancelled) is Outcome.HANDLED
        assert deliver(consumer, cancelled) is Outcome.DUPLICATE

    assert Order.objects.get(pk=order.pk).status == "CANCELLED"
    assert ledger(order.pk) == [("charge", Decimal("20.00")), ("refund", Decimal("20.00"))]
    assert stock() == 5
    assert OutboxMessage.objects.filter(event_type="payments.payment.refunded").count() == 1
    assert OutboxMessage.objects.filter(event_type="inventory.stock.released").count() == 1
    assert cancel(order.pk) == 409


def test_an_order_cancelled_before_its_charge_is_never_charged_or_reserved(order):
    assert cancel(order.pk) == 202
    cancelled = event("orders.order.cancelled")
    assert deliver("payments", cancelled) is Outcome.HANDLED
    assert deliver("inventory", cancelled) is Outcome.HANDLED
    # The saga's own events arrive afterwards (a slow relay, a retry): tombstones stop them.
    assert deliver("payments", event("orders.order.created")) is Outcome.HANDLED

    assert ledger(order.pk) == []
    assert Payment.objects.get(order_id=order.pk).status == Payment.Status.VOIDED
    assert not OutboxMessage.objects.filter(event_type__startswith="payments.").exists()
    assert Reservation.objects.get(order_id=order.pk).status == Reservation.Status.CANCELLED
    assert stock() == 5


def test_cancelled_between_charge_and_reservation_the_stock_is_never_reserved(order):
    assert deliver("payments", event("orders.order.created")) is Outcome.HANDLED
    assert cancel(order.pk) == 202
    cancelled = event("orders.order.cancelled")
    assert deliver("inventory", cancelled) is Outcome.HANDLED
    assert deliver("inventory", event("payments.payment.succeeded")) is Outcome.HANDLED
    assert deliver("payments", cancelled) is Outcome.HANDLED

    assert stock() == 5
    assert not OutboxMessage.objects.filter(event_type="inventory.stock.reserved").exists()
    assert ledger(order.pk) == [("charge", Decimal("20.00")), ("refund", Decimal("20.00"))]


def test_a_late_reservation_after_cancellation_is_released_not_kept(order):
    assert deliver("payments", event("orders.order.created")) is Outcome.HANDLED
    assert cancel(order.pk) == 202
    # Inventory reserves before it hears of the cancellation...
    assert deliver("inventory", event("payments.payment.succeeded")) is Outcome.HANDLED
    assert stock() == 3
    # ...orders ignores the late confirmation, inventory then releases.
    assert deliver("orders", event("inventory.stock.reserved")) is Outcome.HANDLED
    assert Order.objects.get(pk=order.pk).status == "CANCELLED"
    assert deliver("inventory", event("orders.order.cancelled")) is Outcome.HANDLED
    assert stock() == 5


def test_every_compensation_request_refunds_at_most_once(order):
    """Stock failure, then the deadline, then a cancellation attempt: one refund."""
    Product.objects.filter(sku="WIDGET").update(stock=1)
    assert deliver("payments", event("orders.order.created")) is Outcome.HANDLED
    for consumer in ("orders", "inventory"):
        assert deliver(consumer, event("payments.payment.succeeded")) is Outcome.HANDLED
    reservation_failed = event("inventory.stock.reservation_failed")
    assert deliver("payments", reservation_failed) is Outcome.HANDLED
    assert deliver("orders", reservation_failed) is Outcome.HANDLED
    failed = event("orders.order.failed")
    assert failed.payload["reason"] == "out_of_stock"
    assert deliver("payments", failed) is Outcome.HANDLED
    assert deliver("inventory", failed) is Outcome.HANDLED
    Order.objects.filter(pk=order.pk).update(created_at=timezone.now() - timedelta(hours=1))
    assert orders_expire(timeout_seconds=60) == 0  # already FAILED: the deadline does nothing
    assert cancel(order.pk) == 409

    assert ledger(order.pk) == [("charge", Decimal("20.00")), ("refund", Decimal("20.00"))]
    assert Order.objects.get(pk=order.pk).failure_reason == "out_of_stock"
    assert Product.objects.get(sku="WIDGET").stock == 1


def test_the_deadline_fails_a_stuck_order_and_compensates_a_charge(order):
    young = order_place(customer_id="c", lines=[Line("WIDGET", 1)], payment_token="tok_visa")
    assert deliver("payments", event("orders.order.created", order.pk)) is Outcome.HANDLED
    Order.objects.filter(pk=order.pk).update(created_at=timezone.now() - timedelta(seconds=301))

    assert orders_expire(timeout_seconds=300) == 1

    expired = Order.objects.get(pk=order.pk)
    assert (expired.status, expired.failure_reason) == ("FAILED", "timeout")
    assert Order.objects.get(pk=young.pk).status == "PENDING"
    failed = event("orders.order.failed")
    assert failed.payload == {"order_id": str(order.pk), "reason": "timeout"}
    assert deliver("payments", failed) is Outcome.HANDLED
    assert deliver("inventory", failed) is Outcome.HANDLED
    # The saga's late events change nothing now.
    assert deliver("inventory", event("payments.payment.succeeded")) is Outcome.HANDLED
    assert ledger(order.pk) == [("charge", Decimal("20.00")), ("refund", Decimal("20.00"))]
    assert stock() == 5
    assert Order.objects.get(pk=order.pk).status == "FAILED"


def test_a_charge_whose_outcome_was_lost_is_found_before_refunding(order):
    """The gateway charged, the handler crashed before its commit; then the order is cancelled."""
    gateway.charge(
        idempotency_key=charge_key(order.pk),
        order_id=str(order.pk),
        amount=Decimal("20.00"),
        currency="USD",
        token="tok_visa",
    )
    assert cancel(order.pk) == 202
    assert deliver("payments", event("orders.order.cancelled")) is Outcome.HANDLED
    assert deliver("payments", event("orders.order.created")) is Outcome.HANDLED  # the redelivery

    assert ledger(order.pk) == [("charge", Decimal("20.00")), ("refund", Decimal("20.00"))]
    assert Payment.objects.get(order_id=order.pk).status == Payment.Status.REFUNDED


def test_a_timed_out_gateway_call_is_retried_without_a_second_charge():
    product_upsert(sku="WIDGET", name="Widget", price=Decimal("10.00"), stock=5)
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("10.00"), available=5, version=1)
    order = order_place(customer_id="c", lines=[Line("WIDGET", 1)], payment_token="tok_timeout")
    created = event("orders.order.created")

    assert deliver("payments", created) is Outcome.HANDLED  # in flight; the worker's call times out
    payment = Payment.objects.get(order_id=order.pk)
    assert (payment.status, payment.call_attempts) == (Payment.Status.CHARGING, 1)
    assert payment.call_due_at > timezone.now()  # charged, but the answer was lost: again later
    assert ledger(order.pk) == [("charge", Decimal("10.00"))]

    Payment.objects.filter(order_id=order.pk).update(call_due_at=timezone.now())
    assert run_due_calls() == 1  # asks by the same key first: the gateway answers the charge

    assert ledger(order.pk) == [("charge", Decimal("10.00"))]
    assert Payment.objects.get(order_id=order.pk).status == Payment.Status.CHARGED
    [succeeded] = OutboxMessage.objects.filter(event_type__startswith="payments.")
    # recorded by the worker, outside the handler: it still names the order's message as its cause
    assert (succeeded.event_type, succeeded.causation_id) == ("payments.payment.succeeded", str(created.event_id))


def test_a_charge_the_gateway_never_answers_is_given_up_once_it_holds_nothing_under_the_key(settings, caplog):
    settings.GATEWAY_CHARGE_ATTEMPTS = 2
    product_upsert(sku="WIDGET", name="Widget", price=Decimal("10.00"), stock=5)
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("10.00"), available=5, version=1)
    order = order_place(customer_id="c", lines=[Line("WIDGET", 1)], payment_token="tok_unavailable")

    assert deliver("payments", event("orders.order.created")) is Outcome.HANDLED
    for _ in range(2):  # the third attempt finds nothing under the key and gives up
        assert Payment.objects.get(order_id=order.pk).status == Payment.Status.CHARGING
        Payment.objects.filter(order_id=order.pk).update(call_due_at=timezone.now())
        assert run_due_calls() == 1

    payment = Payment.objects.get(order_id=order.pk)
    assert (payment.status, payment.decline_code, payment.call_attempts) == (
        Payment.Status.DECLINED,
        "processing_error",
        3,
    )
    assert event("payments.payment.failed").payload == {
        "order_id": str(order.pk),
        "reason": "payment_declined",
        "decline_code": "processing_error",
    }
    assert ledger(order.pk) == []
    given_up = [r.getMessage() for r in caplog.records if "given up" in r.getMessage()]
    assert given_up == [
        f"charge for order {order.pk} given up after 2 attempts: the gateway holds nothing under its key;"
        " declined (processing_error)"
    ]
    assert deliver("orders", event("payments.payment.failed")) is Outcome.HANDLED
    assert Order.objects.get(pk=order.pk).status == "FAILED"


def test_cancel_answers(order):
    client = Client()
    response = client.post(f"/api/orders/{order.pk}/cancel/")
    assert response.status_code == 202
    assert response.json()["status"] == "CANCELLED"
    again = client.post(f"/api/orders/{order.pk}/cancel/")
    assert again.status_code == 409
    assert again.json()["code"] == "invalid_state"
    assert client.post(f"/api/orders/{uuid.uuid4()}/cancel/").status_code == 404
