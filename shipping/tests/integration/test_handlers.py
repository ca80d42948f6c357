"""Shipping's handlers and services in one process, for the orders in which messages can arrive:
late, twice, a cancellation before its confirmation (tests/e2e/test_shipping.py runs the saga
with it as the Procfile starts the processes)."""

import uuid
from dataclasses import replace

import pytest
from reliable_messaging.api import IncomingEvent, InvalidPayload
from reliable_messaging.testing import Outcome, assert_no_second_effect, deliver, example_payload, published

from shipping import handlers
from shipping.models import Shipment
from shipping.services import shipments_dispatch


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
    return [event_type for event_type, _, _ in published("shipping", correlation_id=str(order_id))]


@pytest.mark.django_db
def test_a_confirmation_twice_prepares_one_shipment():
    order_id = uuid.uuid4()
    handlers.on_order_confirmed([event("orders.order.confirmed", order_id)])
    handlers.on_order_confirmed([event("orders.order.confirmed", order_id)])
    assert list(Shipment.objects.values_list("order_id", "status")) == [(order_id, "PREPARING")]
    assert shipping_events(order_id) == ["shipping.shipment.created"]


@pytest.mark.django_db
def test_a_cancellation_that_overtakes_its_confirmation_leaves_a_tombstone():
    order_id = uuid.uuid4()
    handlers.on_order_cancelled(event("orders.order.cancelled", order_id, previous_status="CONFIRMED"))
    handlers.on_order_confirmed([event("orders.order.confirmed", order_id)])
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
    handlers.on_order_confirmed([event("orders.order.confirmed", order_id)])
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
        handlers.on_order_confirmed([replace(event("orders.order.confirmed", uuid.uuid4()), payload={})])
    with pytest.raises(InvalidPayload, match="previous_status must be PENDING or CONFIRMED, not 'FAILED'"):
        handlers.on_order_cancelled(event("orders.order.cancelled", uuid.uuid4(), previous_status="FAILED"))
    assert Shipment.objects.count() == 0


@pytest.mark.django_db
def test_a_confirmation_delivered_through_the_inbox_prepares_one_shipment_and_announces_it_once():
    payload = example_payload("orders.order.confirmed")
    order_id = payload["order_id"]

    first = assert_no_second_effect(
        "shipping",
        "orders.order.confirmed",
        payload,
        effect=lambda: list(Shipment.objects.values_list("order_id", "status")),
        correlation_id=order_id,
    )

    assert list(Shipment.objects.values_list("order_id", "status")) == [(uuid.UUID(order_id), "PREPARING")]
    assert [(e.event_type, e.payload["order_id"]) for e in first.published] == [("shipping.shipment.created", order_id)]


@pytest.mark.django_db
def test_a_confirmation_its_schema_refuses_is_a_dead_letter_with_no_shipment():
    delivered = deliver("shipping", "orders.order.confirmed", {"order_id": "not-a-uuid"})

    assert (delivered.outcome, delivered.reason) == (Outcome.DEAD_LETTER, "invalid_payload")
    assert (Shipment.objects.count(), delivered.published) == (0, [])
