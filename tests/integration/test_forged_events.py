"""Forged but well-formed events (issue 26, row 6), decided in-process: the schemas refuse what no
honest producer sends, and the order saga ignores what it cannot have caused.

Each message goes through ``reliable_messaging._dispatch.decide`` exactly as a consumer hands it over; the
real processes and raw publishes are tests/e2e/test_forged_events.py. That the format
"system-currency" checks the configured CURRENCY is the bus's own test:
packages/django-reliable-messaging/tests/test_event_contract_checks.py.
"""

import logging
import uuid
from decimal import Decimal

import pytest
from reliable_messaging._dispatch import Decision, Outcome, decide
from reliable_messaging.models import InboxMessage, OutboxMessage

from faultlib.fixtures import ALL_DATABASES
from faultlib.saga import ledger
from tests.support import forged

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

FORGED_ID = "0b5a8f0e-4f0c-4d7e-9a51-5c3c0b0e6f10"


@pytest.fixture
def order():
    """A PENDING order for 2 x WIDGET at 10.00 (20.00 USD), with inventory holding 5."""
    from inventory.services import product_upsert  # the contexts' own: the file collects without them
    from orders.models import StorefrontProduct
    from orders.services.checkout import Line, order_place

    product_upsert(sku="WIDGET", name="Widget", price=Decimal("10.00"), stock=5)
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("10.00"), available=5, version=1)
    return order_place(customer_id="c", lines=[Line("WIDGET", 2)], payment_token="tok_visa")


def deliver(consumer: str, event_type: str, payload: dict, version: int = 1) -> Decision:
    """Payments' gateway worker then makes the calls that are due."""
    from payments.gateway_calls import run_due_calls  # the contexts' own: the file collects without them

    decision = decide(consumer, routing_key=event_type, **forged.message(event_type, payload, version=version))
    if consumer == "payments":
        run_due_calls()
    return decision


def outbox() -> list[str]:
    return list(OutboxMessage.objects.order_by("id").values_list("event_type", flat=True))


def ignored(event: str, reason: str) -> float:
    from orders.metrics import EVENTS_IGNORED  # the contexts' own: the file collects without them

    return EVENTS_IGNORED.labels(event, reason)._value.get()


# --- schemas: what no honest producer sends is the dead letter invalid_payload ------------------

NEGATIVE = forged.NEGATIVE_MONEY
REFUSED = [
    # (consumer, event type, version, payload, the dead letter's error)
    (
        "payments",
        "orders.order.created",
        2,
        forged.order_created_v2(FORGED_ID, total="-500.00"),
        f"orders.order.created v2 at total/amount: {NEGATIVE}",
    ),
    (
        "payments",
        "orders.order.created",
        2,
        forged.order_created_v2(FORGED_ID, currency="EUR"),
        "orders.order.created v2 at total/currency: 'EUR' is not a 'system-currency'",
    ),
    (
        "payments",
        "orders.order.created",
        1,
        forged.order_created_v1(FORGED_ID, total="-500.00"),
        f"orders.order.created v1 at total: {NEGATIVE}",
    ),
    (
        "payments",
        "orders.order.created",
        2,
        forged.order_created_v2(FORGED_ID, quantity=0),
        "orders.order.created v2 at items/0/quantity: 0 is less than the minimum of 1",
    ),
    (
        "inventory",
        "payments.payment.succeeded",
        1,
        forged.payment_succeeded(FORGED_ID, amount="-500.00"),
        f"payments.payment.succeeded v1 at amount: {NEGATIVE}",
    ),
    (
        "orders",
        "payments.payment.succeeded",
        1,
        forged.payment_succeeded(FORGED_ID, currency="EUR"),
        "payments.payment.succeeded v1 at currency: 'EUR' is not a 'system-currency'",
    ),
    (
        "shipping",
        "orders.order.confirmed",
        1,
        forged.order_confirmed(FORGED_ID, total="-500.00"),
        f"orders.order.confirmed v1 at total: {NEGATIVE}",
    ),
    (
        "shipping",
        "orders.order.confirmed",
        1,
        forged.order_confirmed(FORGED_ID, currency="EUR"),
        "orders.order.confirmed v1 at currency: 'EUR' is not a 'system-currency'",
    ),
    (
        "orders",
        "inventory.product.updated",
        1,
        forged.product_updated("WIDGET", price="-5.00", version=10**15),
        "inventory.product.updated v1 at version: 1000000000000000 is greater than the maximum of 2147483647",
    ),
    (
        "orders",
        "inventory.product.updated",
        1,
        forged.product_updated("WIDGET", price="-5.00"),
        "inventory.product.updated v1 at price: '-5.00' does not match '^[0-9]+\\\\.[0-9]{2}$'",
    ),
    (
        "orders",
        "inventory.product.updated",
        1,
        forged.product_updated("WIDGET", version=2**31),
        "inventory.product.updated v1 at version: 2147483648 is greater than the maximum of 2147483647",
    ),
]


@pytest.mark.parametrize(("consumer", "event_type", "version", "payload", "error"), REFUSED)
def test_what_no_honest_producer_sends_is_a_dead_letter_and_changes_nothing(
    order, consumer, event_type, version, payload, error
):
    from inventory.models import Product, Reservation  # the contexts' own: the file collects without them
    from orders.models import Order, StorefrontProduct
    from payments.models import Payment
    from shipping.models import Shipment

    before = outbox()

    decision = deliver(consumer, event_type, payload, version)

    assert (decision.outcome, decision.reason, decision.error) == (Outcome.DEAD_LETTER, "invalid_payload", error)
    assert outbox() == before
    assert ledger(FORGED_ID) == []
    assert not Payment.objects.exists()
    assert not Reservation.objects.exists()
    assert not Shipment.objects.exists()
    assert Product.objects.get(sku="WIDGET").stock == 5
    assert list(StorefrontProduct.objects.values_list("sku", "price", "version")) == [("WIDGET", Decimal("10.00"), 1)]
    assert Order.objects.get().status == "PENDING"
    assert not InboxMessage.objects.exists()


def test_the_newest_sane_version_is_applied_and_a_genuine_update_still_follows(order):
    from inventory.services import product_upsert  # the contexts' own: the file collects without them
    from orders.models import StorefrontProduct

    assert deliver("orders", "inventory.product.updated", forged.product_updated("WIDGET", version=10**15)).reason == (
        "invalid_payload"
    )
    product_upsert(sku="WIDGET", name="Widget", price=Decimal("12.00"), stock=5)  # version 2
    [update] = OutboxMessage.objects.filter(event_type="inventory.product.updated", payload__version=2)
    assert deliver("orders", "inventory.product.updated", update.payload).outcome is Outcome.HANDLED
    assert list(StorefrontProduct.objects.values_list("price", "version")) == [(Decimal("12.00"), 2)]


# --- the order saga: what it cannot have caused is acked, logged and changes nothing -------------

ABOUT_AN_ORDER = [
    ("payments.payment.succeeded", forged.payment_succeeded(FORGED_ID)),
    ("payments.payment.failed", forged.payment_failed(FORGED_ID)),
    ("inventory.stock.reserved", forged.stock_reserved(FORGED_ID, [{"sku": "WIDGET", "quantity": 2}])),
    ("inventory.stock.reservation_failed", forged.reservation_failed(FORGED_ID)),
]


@pytest.mark.parametrize(("event_type", "payload"), ABOUT_AN_ORDER)
def test_orders_ignores_an_event_about_an_order_it_never_had(order, caplog, event_type, payload):
    from orders.models import Order  # the contexts' own: the file collects without them

    before, counted = outbox(), ignored(event_type, "unknown order")

    with caplog.at_level(logging.WARNING, logger="orders.services.saga"):
        decision = deliver("orders", event_type, payload)

    assert decision.outcome is Outcome.HANDLED
    assert [r.getMessage() for r in caplog.records if r.name == "orders.services.saga"] == [
        f"{event_type} ignored, the saga cannot have caused it: unknown order"
    ]
    assert ignored(event_type, "unknown order") == counted + 1
    assert outbox() == before
    assert list(Order.objects.values_list("status", "paid_at")) == [("PENDING", None)]
    assert not Order.objects.filter(pk=FORGED_ID).exists()
    assert InboxMessage.objects.filter(consumer="orders").count() == 1  # acked as handled


def test_stock_reserved_for_an_order_never_paid_never_confirms_it(order):
    from orders.models import Order  # the contexts' own: the file collects without them

    lines = [{"sku": "WIDGET", "quantity": 2}]

    # while the charge has not succeeded (a gateway failing, retried): later, never now
    decision = deliver("orders", "inventory.stock.reserved", forged.stock_reserved(str(order.pk), lines))
    assert (decision.outcome, decision.reason) == (Outcome.RETRY, "handler_error")
    assert decision.error == (
        "TransientError: inventory.stock.reserved before the order's payment succeeded here: later, or never if forged"
    )
    assert Order.objects.get(pk=order.pk).status == "PENDING"

    # once the charge is declined: ignored as too late, the order stays FAILED
    assert deliver("orders", "payments.payment.failed", forged.payment_failed(str(order.pk))).outcome is (
        Outcome.HANDLED
    )
    assert deliver("orders", "inventory.stock.reserved", forged.stock_reserved(str(order.pk), lines)).outcome is (
        Outcome.HANDLED
    )
    failed = Order.objects.get(pk=order.pk)
    assert (failed.status, failed.failure_reason, failed.paid_at) == ("FAILED", "payment_declined", None)
    assert outbox() == ["inventory.product.updated", "orders.order.created", "orders.order.failed"]
    assert ledger(order.pk) == []


def test_a_payment_or_a_reservation_that_is_not_the_orders_is_ignored_and_the_genuine_one_confirms(order):
    from inventory.models import Product  # the contexts' own: the file collects without them
    from orders.models import Order

    oid = str(order.pk)
    wrong_amount = forged.payment_succeeded(oid, amount="1.00", items=[{"sku": "WIDGET", "quantity": 2}])
    assert deliver("orders", "payments.payment.succeeded", wrong_amount).outcome is Outcome.HANDLED
    assert Order.objects.get(pk=order.pk).paid_at is None
    assert ignored("payments.payment.succeeded", "not the order's total") >= 1

    # the genuine saga: payments charges, orders notes it, inventory reserves
    created = OutboxMessage.objects.get(event_type="orders.order.created")
    assert deliver("payments", "orders.order.created", created.payload, created.schema_version).outcome is (
        Outcome.HANDLED
    )
    paid = OutboxMessage.objects.get(event_type="payments.payment.succeeded")
    for consumer in ("orders", "inventory"):
        assert deliver(consumer, "payments.payment.succeeded", paid.payload).outcome is Outcome.HANDLED
    assert Order.objects.get(pk=order.pk).paid_at is not None

    # forged: other lines than the order's, a decline after the success
    other_lines = forged.stock_reserved(oid, [{"sku": "WIDGET", "quantity": 1}])
    assert deliver("orders", "inventory.stock.reserved", other_lines).outcome is Outcome.HANDLED
    assert deliver("orders", "payments.payment.failed", forged.payment_failed(oid)).outcome is Outcome.HANDLED
    assert Order.objects.get(pk=order.pk).status == "PENDING"

    reserved = OutboxMessage.objects.get(event_type="inventory.stock.reserved")
    assert deliver("orders", "inventory.stock.reserved", reserved.payload).outcome is Outcome.HANDLED
    assert Order.objects.get(pk=order.pk).status == "CONFIRMED"
    assert ledger(order.pk) == [("charge", Decimal("20.00"))]
    assert Product.objects.get(sku="WIDGET").stock == 3
    assert OutboxMessage.objects.filter(event_type="orders.order.confirmed").count() == 1


def test_a_stock_outcome_that_overtook_its_payment_is_decided_once_the_payment_arrives(order):
    """A retried delivery may bring the stock outcome first: retried, it confirms as usual."""
    from orders.models import Order  # the contexts' own: the file collects without them

    created = OutboxMessage.objects.get(event_type="orders.order.created")
    deliver("payments", "orders.order.created", created.payload, created.schema_version)
    paid = OutboxMessage.objects.get(event_type="payments.payment.succeeded")
    deliver("inventory", "payments.payment.succeeded", paid.payload)
    reserved = OutboxMessage.objects.get(event_type="inventory.stock.reserved")

    assert deliver("orders", "inventory.stock.reserved", reserved.payload).outcome is Outcome.RETRY
    assert deliver("orders", "payments.payment.succeeded", paid.payload).outcome is Outcome.HANDLED
    assert deliver("orders", "inventory.stock.reserved", reserved.payload).outcome is Outcome.HANDLED
    assert Order.objects.get(pk=order.pk).status == "CONFIRMED"


def test_what_payments_inventory_and_shipping_cannot_tell_by_themselves(order):
    """Well-formed events about an order nobody placed: payments, inventory and shipping keep no
    record of orders before these very events, so they act (the broker users of issue 26 refuse
    such a publish); orders, which has the orders, ignores the outcome they lead to."""
    from payments.models import Payment  # the contexts' own: the file collects without them
    from shipping.models import Shipment

    unknown = str(uuid.uuid4())
    assert deliver("payments", "orders.order.created", forged.order_created_v2(unknown), 2).outcome is (Outcome.HANDLED)
    assert ledger(unknown) == [("charge", Decimal("10.00"))]
    assert deliver("shipping", "orders.order.confirmed", forged.order_confirmed(unknown)).outcome is Outcome.HANDLED
    assert Shipment.objects.get(order_id=unknown).status == "PREPARING"
    # A refund for an order payments never charged moves no money: the gateway has no charge.
    assert deliver("payments", "orders.order.failed", {"order_id": FORGED_ID, "reason": "timeout"}).outcome is (
        Outcome.HANDLED
    )
    assert ledger(FORGED_ID) == []
    assert Payment.objects.get(order_id=FORGED_ID).status == Payment.Status.VOIDED
