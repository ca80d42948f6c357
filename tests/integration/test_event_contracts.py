"""The shop's event contracts: a schema per event and version, its up- and downcasters, its
committed snapshots, and payments reading every version of an order (docs/evolving-events.md). How
the bus checks contracts (a payload against its version, EVENT_VERSIONS, the freeze, what a reader
cannot read, declarations refused) is the package's test:
packages/django-reliable-messaging/tests/test_event_contract_checks.py, test_versions.py."""

import copy
import json
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from reliable_messaging._contracts import (
    schemas,
)
from reliable_messaging._declarations import context_of
from reliable_messaging._dispatch import Decision, Outcome, decide
from reliable_messaging._field_crypto import encrypt_fields
from reliable_messaging._schema_freeze import frozen_problems
from reliable_messaging.models import OutboxMessage

from faultlib.fixtures import ALL_DATABASES

SNAPSHOTS = Path(settings.BASE_DIR) / "docs" / "schemas-snapshot"
ORDER_ID = "0190f3a4-0000-7000-8000-000000000001"
CREATED_V1 = {
    "order_id": ORDER_ID,
    "customer_id": "alice",
    "total": "39.98",
    "currency": "USD",
    "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": "19.99"}],
    "payment_token": "tok_visa",
}
CREATED_V2 = {
    "order_id": ORDER_ID,
    "customer_id": "alice",
    "total": {"amount": "39.98", "currency": "USD"},
    "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": {"amount": "19.99", "currency": "USD"}}],
    "payment_token": "tok_visa",
}


def test_every_published_event_has_a_schema_for_each_version_from_1():
    versions: dict[str, list[int]] = {}
    for event_type, version in sorted(schemas()):
        versions.setdefault(event_type, []).append(version)
    assert all(found == list(range(1, len(found) + 1)) for found in versions.values()), versions
    # The shop's own events exactly; a context added later brings its own.
    shop = {
        e: found for e, found in versions.items() if context_of(e) in ("orders", "payments", "inventory", "shipping")
    }
    assert shop == {
        "inventory.product.updated": [1],
        "inventory.stock.released": [1],
        "inventory.stock.reservation_failed": [1],
        "inventory.stock.reserved": [1],
        "inventory.stock.restocked": [1],
        "inventory.stock.taken_back": [1],
        "orders.order.cancelled": [1],
        "orders.order.confirmed": [1],
        "orders.order.created": [1, 2, 3, 4],
        "orders.order.failed": [1],
        "orders.order.return_refused": [1],
        "orders.order.return_requested": [1],
        "orders.order.returned": [1],
        # the return saga's commands (orders/services/returns.py)
        "orders.return.book_pickup": [1],
        "orders.return.cancel_pickup": [1],
        "orders.return.deadline": [1],
        "orders.return.refund": [1],
        "orders.return.restock": [1],
        "orders.return.take_back_stock": [1],
        "payments.payment.failed": [1],
        "payments.payment.refunded": [1],
        "payments.payment.succeeded": [1],
        "payments.refund.refused": [1],
        "shipping.shipment.cancelled": [1],
        "shipping.shipment.created": [1],
        "shipping.shipment.dispatched": [1],
        "shipping.shipment.refused": [1],
        "shipping.shipment.reinstated": [1],
        "shipping.shipment.return_requested": [1],
    }


def test_the_upcasters_and_the_downcasters_turn_one_version_into_the_other():
    # the contexts' own: the file collects without them
    from orders.contracts import order_created_v2_to_v1, order_created_v3_to_v2, order_created_v4_to_v3
    from payments.upcasters import order_created_v1_to_v2, order_created_v2_to_v3, order_created_v3_to_v4

    assert order_created_v1_to_v2(copy.deepcopy(CREATED_V1)) == CREATED_V2
    assert order_created_v2_to_v1(copy.deepcopy(CREATED_V2)) == CREATED_V1
    # v3 is v2's shape; only the bus's encryption of the token (v3 does not require it) differs
    assert order_created_v2_to_v3(copy.deepcopy(CREATED_V2)) == CREATED_V2
    assert order_created_v3_to_v2(copy.deepcopy(CREATED_V2)) == CREATED_V2
    # v4 is v3's shape; only the bus's sealing of the customer's id (v4 does not require it) differs
    assert order_created_v3_to_v4(copy.deepcopy(CREATED_V2)) == CREATED_V2
    assert order_created_v4_to_v3(copy.deepcopy(CREATED_V2)) == CREATED_V2


def test_the_token_is_encrypted_for_payments_from_v3():
    # v1 and v2 require it: a pin to them (readers not yet upgraded) writes it clear
    assert encrypt_fields("orders.order.created", 1, CREATED_V1) == CREATED_V1
    assert encrypt_fields("orders.order.created", 2, CREATED_V2) == CREATED_V2
    sealed = encrypt_fields("orders.order.created", 3, CREATED_V2)["payment_token"]["$encrypted"]
    assert (sorted(sealed), sealed["for"]) == (["ct", "for", "kid"], ["payments"])


@pytest.mark.django_db
def test_the_customer_is_sealed_under_their_own_key_from_v4():
    # v3 requires it: a pin to v3 writes it clear; v4 seals it for no reader
    assert encrypt_fields("orders.order.created", 3, CREATED_V2)["customer_id"] == "alice"
    v4 = encrypt_fields("orders.order.created", 4, CREATED_V2)
    sealed = [v4[field]["$encrypted"] for field in ("customer_id", "payment_token")]
    assert [(sorted(s), s["for"]) for s in sealed] == [(["ct", "for", "sub"], []), (["ct", "for", "kid"], ["payments"])]


def test_every_schema_matches_its_committed_snapshot():
    assert frozen_problems(schemas(), SNAPSHOTS) == []


# --- payments reads every version of an order (its handler and the outbox in this process) --------
def deliver(payload: dict, version: int) -> Decision:
    """To payments, whose gateway worker then makes the charge."""
    from payments.gateway_calls import run_due_calls  # the context's own: the file collects without it

    decision = decide(
        "payments",
        body=json.dumps(payload).encode(),
        properties={"message_id": str(uuid.uuid4()), "correlation_id": ORDER_ID},
        headers={"event_type": "orders.order.created", "schema_version": version},
        routing_key="orders.order.created",
    )
    run_due_calls()
    return decision


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
@pytest.mark.parametrize(
    ("payload", "version"),
    [(CREATED_V1, 1), (CREATED_V2, 2), (encrypt_fields("orders.order.created", 3, CREATED_V2), 3), (None, 4)],
)
def test_payments_reads_every_version_of_an_order_and_charges_it_the_same(payload, version):
    from payments.models import Payment  # the context's own: the file collects without it

    # v4 seals the customer under a key this test's database keeps: written here, not at collection
    decision = deliver(payload or encrypt_fields("orders.order.created", 4, CREATED_V2), version)
    # the customer's id reaches payments as it was written: clear up to v3, not at all from v4
    seen = CREATED_V2 if version < 4 else {k: v for k, v in CREATED_V2.items() if k != "customer_id"}
    assert (decision.outcome, decision.event.schema_version, decision.event.payload) == (Outcome.HANDLED, 4, seen)
    payment = Payment.objects.get()
    assert (str(payment.order_id), payment.status, payment.amount, payment.currency) == (
        ORDER_ID,
        "charged",
        Decimal("39.98"),
        "USD",
    )
    [succeeded] = OutboxMessage.objects.all()
    assert (succeeded.event_type, succeeded.schema_version, succeeded.payload["items"]) == (
        "payments.payment.succeeded",
        1,
        [{"sku": "WIDGET", "quantity": 2, "unit_price": "19.99"}],
    )
