"""Issue 26, row 6: forged but well-formed events published raw to the events exchange, against
the consumer processes as the Procfile runs them, on PostgreSQL and RabbitMQ with one shared
broker user (the default). What no honest producer sends is a dead letter ``invalid_payload``;
what the order saga cannot have caused is acked with a warning and changes nothing; what a
context cannot tell by itself is acted on, exactly as asserted here (broker users per context
refuse those publishes: the other half of issue 26). Then a genuine order still confirms.
"""

import uuid
from collections import Counter
from decimal import Decimal

import pytest
from django.test import Client
from reliable_messaging._topology import EVENT_LOG_CONSUMER, subscribers_of
from reliable_messaging.models import DeadLetter, InboxMessage

from faultlib.broker import publish_raw
from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import wait_quiet
from faultlib.processes import procfile_commands, wait_until
from faultlib.saga import checkout, ledger, seed_catalog, stock, wait_terminal
from faultlib.scenarios import FAST_RETRIES
from tests.support import forged

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

UNKNOWN_ORDER_IGNORED = "ignored, the saga cannot have caused it: unknown order"


def publish(event_type: str, payload: dict, version: int = 1) -> str:
    """Publish as an outsider with the shared user would: to the exchange, the exact headers."""
    message = forged.message(event_type, payload, version=version)
    publish_raw(event_type, message["body"], properties=message["properties"], headers=message["headers"])
    return message["properties"]["message_id"]


def dead_letters() -> Counter:
    return Counter(DeadLetter.objects.values_list("consumer", "event_type", "reason"))


def test_each_forged_event_of_row_6_then_a_genuine_order_confirms(processes, quiet_broker):
    from inventory.services import product_upsert  # the contexts' own: the file collects without them
    from orders.models import Order, StorefrontProduct
    from payments.models import Payment
    from shipping.models import Shipment

    for name, args in procfile_commands().items():
        if name != "deadline":  # the stuck order must stay PENDING while the test looks at it
            processes.start(name, *args, env={**FAST_RETRIES, "GATEWAY_CHARGE_ATTEMPTS": "1000", "LOG_FORMAT": "json"})
    seed_catalog()  # WIDGET 19.99 x 1000, RARE 250.00 x 3
    client = Client()

    # A real order whose charge keeps failing (the gateway is unavailable): the gateway worker tries
    # it again and again (never given up in this test), the order stays PENDING.
    failing = checkout(client, [{"sku": "WIDGET", "quantity": 1}], token="tok_unavailable")["id"]
    tried = Payment.objects.filter(order_id=failing, status=Payment.Status.CHARGING, call_attempts__gte=2)
    wait_until(tried.exists, timeout=60, message="its charge tried twice")

    never_placed, never_paid, never_confirmed = (str(uuid.uuid4()) for _ in range(3))
    # Money no honest producer sends: dead letters, nothing else.
    publish("orders.order.created", forged.order_created_v2(str(uuid.uuid4()), total="-500.00"), version=2)
    publish("orders.order.created", forged.order_created_v2(str(uuid.uuid4()), currency="EUR"), version=2)
    publish("orders.order.confirmed", forged.order_confirmed(str(uuid.uuid4()), total="-500.00"))
    publish("inventory.product.updated", forged.product_updated("WIDGET", price="-5.00", version=10**15))
    publish("inventory.product.updated", forged.product_updated("WIDGET", price="-5.00", version=1000))
    publish("inventory.product.updated", forged.product_updated("WIDGET", version=10**15))
    # A stock reservation for the order whose charge is failing: never confirms it.
    publish("inventory.stock.reserved", forged.stock_reserved(failing, [{"sku": "WIDGET", "quantity": 1}]))
    # Well-formed, about orders nobody placed: what payments, inventory and shipping cannot tell.
    publish("orders.order.created", forged.order_created_v2(never_placed), version=2)
    publish("payments.payment.succeeded", forged.payment_succeeded(never_paid, items=[{"sku": "RARE", "quantity": 1}]))
    publish("orders.order.confirmed", forged.order_confirmed(never_confirmed))

    wait_quiet(timeout=90, allow_pending_orders=True, what="the forged events handled")
    # The order nobody placed is charged by the gateway worker, whose calls in flight a quiet that
    # allows pending orders does not wait for (the failing order's never ends): wait for its charge,
    # then for what the charge causes, before asserting any of it.
    charged = Payment.objects.filter(order_id=never_placed, status=Payment.Status.CHARGED)
    wait_until(charged.exists, timeout=60, message="the gateway worker's charge of the order nobody placed")
    wait_quiet(timeout=90, allow_pending_orders=True, what="the charge's consequences handled")

    # Refused by every context bound to them (payments; shipping, and any follower; orders), never by
    # the event log, which records what it sees.
    refused = {"orders.order.created": 2, "orders.order.confirmed": 1, "inventory.product.updated": 3}
    expected = Counter(
        {
            (consumer, event_type, "invalid_payload"): n
            for event_type, n in refused.items()
            for consumer in subscribers_of(event_type)
            if consumer != EVENT_LOG_CONSUMER
        }
    )
    assert {c for c, e, _ in expected if e == "orders.order.confirmed"} >= {"shipping"}
    expected[("orders", "inventory.stock.reserved", "handler_error")] = 1  # retried: its payment never came
    assert dead_letters() == expected
    [stock_first] = DeadLetter.objects.filter(consumer="orders", event_type="inventory.stock.reserved")
    assert stock_first.attempts == 5
    assert stock_first.error == (
        "TransientError: inventory.stock.reserved before the order's payment succeeded here: later, or never if forged"
    )
    assert {d.error for d in DeadLetter.objects.filter(reason="invalid_payload", event_type__startswith="orders.")} == {
        f"orders.order.created v2 at total/amount: {forged.NEGATIVE_MONEY}",
        "orders.order.created v2 at total/currency: 'EUR' is not a 'system-currency'",
        f"orders.order.confirmed v1 at total: {forged.NEGATIVE_MONEY}",
    }

    product_errors = DeadLetter.objects.filter(event_type="inventory.product.updated").values_list("error", flat=True)
    assert sorted(product_errors) == [
        "inventory.product.updated v1 at price: '-5.00' does not match '^[0-9]+\\\\.[0-9]{2}$'",
        *["inventory.product.updated v1 at version: 1000000000000000 is greater than the maximum of 2147483647"] * 2,
    ]

    # The failing order: PENDING, never charged, nothing reserved for it.
    stuck = Order.objects.get(pk=failing)
    assert (stuck.status, stuck.paid_at) == ("PENDING", None)
    assert ledger(failing) == []
    # Orders has none of the forged orders, and ignored (acked, logged) what reached it about them.
    assert not Order.objects.exclude(pk=failing).exists()
    ignored = InboxMessage.objects.filter(consumer="orders", correlation_id__in=[never_placed, never_paid])
    assert sorted(ignored.values_list("event_type", flat=True)) == [
        "inventory.stock.reserved",
        "inventory.stock.reserved",
        "payments.payment.succeeded",
        "payments.payment.succeeded",
    ]
    orders_consumer = next(proc for name, proc, _ in processes.procs if name == "orders-consumers")
    warnings = [line["event"] for line in processes.log_lines(orders_consumer) if line.get("level") == "warning"]
    assert Counter(w for w in warnings if w.endswith(UNKNOWN_ORDER_IGNORED)) == {
        f"payments.payment.succeeded {UNKNOWN_ORDER_IGNORED}": 2,
        f"inventory.stock.reserved {UNKNOWN_ORDER_IGNORED}": 2,
    }
    # What payments, inventory and shipping cannot tell without broker users: acted on, exactly.
    assert ledger(never_placed) == [("charge", Decimal("10.00"))]
    assert ledger(never_paid) == []
    assert stock("RARE") == 3 - 1
    assert list(Shipment.objects.values_list("order_id", "status")) == [(uuid.UUID(never_confirmed), "PREPARING")]
    # The storefront kept inventory's price and version (2: the forged order's reservation), not the forged ones.
    assert list(StorefrontProduct.objects.filter(sku="WIDGET").values_list("price", "version")) == [
        (Decimal("19.99"), 2)
    ]

    # A genuine catalogue update still applies, and a genuine order still confirms.
    product_upsert(sku="WIDGET", name="Widget", price=Decimal("21.00"), stock=stock("WIDGET"))
    wait_until(
        lambda: StorefrontProduct.objects.get(sku="WIDGET").version == 3, timeout=30, message="the genuine update"
    )
    assert StorefrontProduct.objects.get(sku="WIDGET").price == Decimal("21.00")
    genuine = checkout(client, [{"sku": "WIDGET", "quantity": 2}])["id"]
    wait_terminal([genuine])
    assert Order.objects.get(pk=genuine).status == "CONFIRMED"
    assert ledger(genuine) == [("charge", Decimal("42.00"))]
    wait_until(lambda: Shipment.objects.filter(order_id=genuine).exists(), timeout=30, message="its shipment")
    assert stock("WIDGET") == 1000 - 1 - 2  # the forged order's reservation, then the genuine one
    assert dead_letters() == expected
