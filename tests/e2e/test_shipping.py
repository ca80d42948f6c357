"""Shipping follows the saga without ever answering it: a shipment per confirmed order,
cancelled or returned with the order, dispatched once by an operator from the admin.

The first test runs the processes exactly as the Procfile starts them on PostgreSQL and
RabbitMQ; the others call shipping's services and handlers directly, for the orders in which
messages can arrive (late, twice, a cancellation before its confirmation).
"""

import uuid
from dataclasses import replace

import pytest
from django.contrib.auth.models import User
from django.test import Client

from faultlib.invariants import check_invariants, wait_quiet
from faultlib.processes import procfile_commands, wait_until
from faultlib.saga import CATALOG, asserted, checkout, seed_catalog, wait_terminal
from messaging.api import InvalidPayload
from messaging.envelope import IncomingEvent
from messaging.models import OutboxMessage
from orders.models import Order
from shipping import handlers
from shipping.models import Shipment
from shipping.services import shipments_dispatch
from tests.conftest import ALL_DATABASES


def timeline(client: Client, order_id: str) -> list[str]:
    """The timeline's events of the participants and shipping (a follower added later has its own tests)."""
    return asserted([e["event_type"] for e in client.get(f"/api/orders/{order_id}/").json()["timeline"]], "shipping")


def wait_for_event(client: Client, order_id: str, event_type: str) -> list[str]:
    wait_until(lambda: event_type in timeline(client, order_id), timeout=30, message=f"{event_type} in the timeline")
    return timeline(client, order_id)


def dispatch_from_admin(staff: Client, *orders: str) -> list[str]:
    """Select the orders' shipments in the admin list, run the action; the messages it shows."""
    ids = [str(s.pk) for s in Shipment.objects.filter(order_id__in=orders)]
    response = staff.post("/admin/shipping/shipment/", {"action": "dispatch", "_selected_action": ids}, follow=True)
    assert response.status_code == 200
    return [str(m) for m in response.context["messages"]]


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_the_saga_with_shipping_as_the_procfile_runs_it(processes, quiet_broker):
    started = procfile_commands()
    assert sorted(started) == ["consumers", "deadline", "gateway", "gateway-calls", "orders-consumers", "relay"]
    for name, args in started.items():
        processes.start(name, *args)
    seed_catalog()
    client = Client()
    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", "ops@example.com", "x"))

    kept = checkout(client, [{"sku": "WIDGET", "quantity": 1}])["id"]
    cancelled = checkout(client, [{"sku": "WIDGET", "quantity": 1}])["id"]
    returned = checkout(client, [{"sku": "WIDGET", "quantity": 1}])["id"]
    declined = checkout(client, [{"sku": "WIDGET", "quantity": 1}], token="tok_chargeDeclined")["id"]
    wait_terminal([kept, cancelled, returned, declined])
    for order in (kept, cancelled, returned):
        assert wait_for_event(client, order, "shipping.shipment.created") == [
            "orders.order.created",
            "payments.payment.succeeded",
            "inventory.stock.reserved",
            "orders.order.confirmed",
            "shipping.shipment.created",
        ]

    # Cancelled before dispatch: the shipment is cancelled, and can no longer be dispatched.
    assert client.post(f"/api/orders/{cancelled}/cancel/").status_code == 202
    after = wait_for_event(client, cancelled, "shipping.shipment.cancelled")
    assert after[5] == "orders.order.cancelled"
    assert sorted(after[6:]) == ["inventory.stock.released", "payments.payment.refunded", "shipping.shipment.cancelled"]
    assert dispatch_from_admin(staff, cancelled) == [
        f"Not dispatched, only a PREPARING shipment can be: {cancelled} (CANCELLED)."
    ]

    # Dispatched (twice: the second time is refused), then cancelled: a return is requested.
    assert dispatch_from_admin(staff, kept, returned) == ["Dispatched 2 shipment(s)."]
    assert dispatch_from_admin(staff, kept) == [
        f"Not dispatched, only a PREPARING shipment can be: {kept} (DISPATCHED)."
    ]
    assert client.post(f"/api/orders/{returned}/cancel/").status_code == 202
    wait_for_event(client, returned, "shipping.shipment.return_requested")
    wait_for_event(client, kept, "shipping.shipment.dispatched")

    assert dict(Shipment.objects.values_list("order_id", "status")) == {
        uuid.UUID(kept): "DISPATCHED",
        uuid.UUID(cancelled): "CANCELLED",
        uuid.UUID(returned): "RETURN_REQUESTED",
    }
    assert OutboxMessage.objects.filter(event_type="shipping.shipment.dispatched").count() == 2
    # Shipping never changes the saga's outcome.
    assert dict(Order.objects.values_list("id", "status")) == {
        uuid.UUID(kept): "CONFIRMED",
        uuid.UUID(cancelled): "CANCELLED",
        uuid.UUID(returned): "CANCELLED",
        uuid.UUID(declined): "FAILED",
    }
    wait_quiet(timeout=60)
    report = check_invariants(initial_stock={sku: stock for sku, _, _, stock in CATALOG}, broker=False)
    assert report.violations == []  # every published event valid for its version's schema among them
    assert asserted(sorted(set(OutboxMessage.objects.values_list("event_type", "schema_version"))), "shipping") == [
        ("inventory.product.updated", 1),
        ("inventory.stock.released", 1),
        ("inventory.stock.reserved", 1),
        ("orders.order.cancelled", 1),
        ("orders.order.confirmed", 1),
        ("orders.order.created", 2),
        ("orders.order.failed", 1),
        ("payments.payment.failed", 1),
        ("payments.payment.refunded", 1),
        ("payments.payment.succeeded", 1),
        ("shipping.shipment.cancelled", 1),
        ("shipping.shipment.created", 1),
        ("shipping.shipment.dispatched", 1),
        ("shipping.shipment.return_requested", 1),
    ]


# --- the order of arrival, with the services and handlers in one process ----------------------
def event(event_type: str, order_id: uuid.UUID, **payload) -> IncomingEvent:
    return IncomingEvent(
        message_id=str(uuid.uuid4()),
        event_type=event_type,
        schema_version=1,
        correlation_id=str(order_id),
        causation_id="",
        occurred_at="",
        payload={"order_id": str(order_id), **payload},
    )


def shipping_events(order_id: uuid.UUID) -> list[str]:
    return list(
        OutboxMessage.objects.filter(correlation_id=str(order_id)).order_by("id").values_list("event_type", flat=True)
    )


@pytest.mark.django_db
def test_a_confirmation_twice_prepares_one_shipment():
    order_id = uuid.uuid4()
    handlers.on_order_confirmed(event("orders.order.confirmed", order_id))
    handlers.on_order_confirmed(event("orders.order.confirmed", order_id))
    assert list(Shipment.objects.values_list("order_id", "status")) == [(order_id, "PREPARING")]
    assert shipping_events(order_id) == ["shipping.shipment.created"]


@pytest.mark.django_db
def test_a_cancellation_that_overtakes_its_confirmation_leaves_a_tombstone():
    order_id = uuid.uuid4()
    handlers.on_order_cancelled(event("orders.order.cancelled", order_id, previous_status="CONFIRMED"))
    handlers.on_order_confirmed(event("orders.order.confirmed", order_id))
    handlers.on_order_cancelled(event("orders.order.cancelled", order_id, previous_status="CONFIRMED"))
    assert list(Shipment.objects.values_list("order_id", "status")) == [(order_id, "CANCELLED")]
    assert shipping_events(order_id) == ["shipping.shipment.cancelled"]
    shipment = Shipment.objects.get()
    result = shipments_dispatch(shipment_ids=[shipment.pk])
    assert (result.dispatched, [s.pk for s in result.refused]) == ([], [shipment.pk])


@pytest.mark.django_db
def test_a_pending_order_cancelled_never_gets_a_shipment():
    order_id = uuid.uuid4()
    handlers.on_order_cancelled(event("orders.order.cancelled", order_id, previous_status="PENDING"))
    assert Shipment.objects.count() == 0
    assert shipping_events(order_id) == []


@pytest.mark.django_db
def test_dispatch_once_then_a_cancellation_requests_the_return_once():
    order_id = uuid.uuid4()
    handlers.on_order_confirmed(event("orders.order.confirmed", order_id))
    shipment = Shipment.objects.get()
    assert [s.pk for s in shipments_dispatch(shipment_ids=[shipment.pk]).dispatched] == [shipment.pk]
    assert [s.pk for s in shipments_dispatch(shipment_ids=[shipment.pk]).refused] == [shipment.pk]
    for _ in range(2):
        handlers.on_order_cancelled(event("orders.order.cancelled", order_id, previous_status="CONFIRMED"))
    assert Shipment.objects.get().status == "RETURN_REQUESTED"
    assert shipping_events(order_id) == [
        "shipping.shipment.created",
        "shipping.shipment.dispatched",
        "shipping.shipment.return_requested",
    ]


@pytest.mark.django_db
def test_a_payload_without_an_order_id_or_with_a_strange_previous_status_is_refused():
    with pytest.raises(InvalidPayload, match="order_id missing"):
        handlers.on_order_confirmed(replace(event("orders.order.confirmed", uuid.uuid4()), payload={}))
    with pytest.raises(InvalidPayload, match="previous_status must be PENDING or CONFIRMED, not 'FAILED'"):
        handlers.on_order_cancelled(event("orders.order.cancelled", uuid.uuid4(), previous_status="FAILED"))
    assert Shipment.objects.count() == 0
