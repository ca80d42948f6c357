"""The return saga (orders/services/returns.py) through the API, a real relay and real consumers on
PostgreSQL and RabbitMQ, in the default deployment (choreographed orders, no orchestrator): one
order returned, one whose refund payments refuses, compensated. The in-process cases (every
message's order, a repeated step key, the 409s) are tests/integration/test_returns.py."""

from collections import Counter
from decimal import Decimal

import pytest
from django.apps import apps
from django.test import Client
from reliable_messaging import sagas
from reliable_messaging.models import OutboxMessage

from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import wait_until
from faultlib.saga import checkout, ledger, seed_catalog, stock, wait_terminal
from orders.models import Order
from orders.services.returns import NAME, R
from payments.models import Payment

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=ALL_DATABASES),
    pytest.mark.needs_contexts("shipping"),  # the return's first step
]


def shipment_status(order_id: str) -> str:
    """By its label, here: a tree without shipping still collects this module."""
    return apps.get_model("shipping", "Shipment").objects.get(order_id=order_id).status


@pytest.fixture
def running_saga(processes, quiet_broker):
    processes.start("relay", "run_outbox_relay")
    processes.start("consumers", "run_consumers")
    seed_catalog()
    return processes


def sent(order_id: str) -> Counter:
    """Each message type written for the order, and how many of it."""
    return Counter(OutboxMessage.objects.filter(correlation_id=order_id).values_list("event_type", flat=True))


def settled(order_ids: list[str]) -> bool:
    saga_states = [getattr(sagas.instance_of(NAME, order_id), "state", None) for order_id in order_ids]
    return all(state in (R.RETURNED, R.NOT_RETURNED) for state in saga_states) and not Order.objects.filter(
        pk__in=order_ids, status="RETURNING"
    )


def test_a_return_and_a_refused_return_end_to_end(running_saga):
    client = Client()
    kept = checkout(client, [{"sku": "WIDGET", "quantity": 2}])["id"]
    refused = checkout(client, [{"sku": "WIDGET", "quantity": 1}])["id"]
    wait_terminal([kept, refused])
    shipments = apps.get_model("shipping", "Shipment").objects
    wait_until(lambda: shipments.filter(order_id__in=[kept, refused]).count() == 2, timeout=30, message="parcels")
    assert stock("WIDGET") == 1000 - 3
    Payment.objects.filter(order_id=refused).update(status="refunded")  # payments no longer holds its charge

    for order_id in (kept, refused):
        response = client.post(f"/api/orders/{order_id}/return/")
        assert (response.status_code, response.json()["status"]) == (202, "RETURNING")
    wait_until(lambda: settled([kept, refused]), timeout=90, message="both returns to end")

    assert Order.objects.get(pk=kept).status == "RETURNED"
    assert ledger(kept) == [("charge", Decimal("39.98")), ("refund", Decimal("39.98"))]
    assert Order.objects.get(pk=refused).status == "CONFIRMED"
    assert ledger(refused) == [("charge", Decimal("19.99"))]
    assert stock("WIDGET") == 1000 - 1  # the returned order's 2 back; the refused one's restocked and taken out
    assert shipment_status(kept) == "CANCELLED"
    assert shipment_status(refused) == "PREPARING"

    once = {"orders.order.return_requested", "orders.return.book_pickup", "shipping.shipment.cancelled"}
    once |= {"orders.return.restock", "inventory.stock.restocked", "orders.return.refund"}
    returned = {
        t: n for t, n in sent(kept).items() if t in once | {"payments.payment.refunded", "orders.order.returned"}
    }
    assert returned == dict.fromkeys(once | {"payments.payment.refunded", "orders.order.returned"}, 1)
    compensated = once | {"payments.refund.refused", "orders.return.take_back_stock", "inventory.stock.taken_back"}
    compensated |= {"orders.return.cancel_pickup", "shipping.shipment.reinstated", "orders.order.return_refused"}
    assert {t: n for t, n in sent(refused).items() if t in compensated} == dict.fromkeys(compensated, 1)
    assert "payments.payment.refunded" not in sent(refused)
