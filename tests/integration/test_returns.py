"""The return saga (orders/services/returns.py) in the default deployment (choreographed orders, no
orchestrator), decided in-process: every message goes through the bus's dispatch as a consumer
hands it over (faultlib.simulation's ``Bus`` stands in for the relay and RabbitMQ), payments'
gateway worker makes the refund, the stand-in gateway keeps the ledger."""

import json
import re
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.apps import apps
from django.test import Client
from reliable_messaging import sagas
from reliable_messaging._dispatch import Outcome, decide
from reliable_messaging.models import OutboxMessage

from faultlib.fixtures import ALL_DATABASES
from faultlib.saga import ledger, stock
from faultlib.simulation import Bus
from faultlib.steps import offered
from inventory.models import Reservation
from inventory.services import product_upsert
from orders.conf import setting
from orders.models import Order
from orders.services.checkout import Line, order_place
from orders.services.returns import NAME, R
from payments.models import Payment
from tests.integration.test_swimlane import events, swimlane
from tests.support import forged

pytestmark = [
    pytest.mark.django_db(transaction=True, databases=ALL_DATABASES),
    pytest.mark.needs_contexts("shipping"),  # the return's first step
]


def shipment_status(order_id: str) -> str:
    """By its label, here: a tree without shipping still collects this module."""
    return apps.get_model("shipping", "Shipment").objects.get(order_id=order_id).status


calls_in_flight, gateway_worker_step = offered("gateway_calls_in_flight"), offered("gateway_worker_step")

# What a return sends and is answered, in order, after the order's own confirmation.
RETURN_STEPS = [
    "orders.order.return_requested",
    "orders.return.book_pickup",
    "shipping.shipment.cancelled",  # not dispatched yet: the parcel is stopped
    "orders.return.restock",
    "inventory.stock.restocked",
    "orders.return.refund",
]


@pytest.fixture
def bus():
    """WIDGET at 10.00, 5 in stock, known to the storefront."""
    product_upsert(sku="WIDGET", name="Widget", price=Decimal("10.00"), stock=5)
    bus = Bus({"WIDGET"})
    run_to_quiet(bus)
    return bus


def run_to_quiet(bus: Bus, limit: int = 300) -> None:
    """Every delivery in the order it was published, and the gateway worker when nothing else is left."""
    order_ids = [i for i in bus.scope if i != "WIDGET"]
    for _ in range(limit):
        bus.relay()
        if bus.pending:
            bus.deliver(0)
        elif calls_in_flight(order_ids):
            gateway_worker_step(order_ids)
        else:
            return
    raise AssertionError("still busy")


def confirmed(bus: Bus, quantity: int = 2) -> str:
    """An order placed and confirmed by the choreography, its parcel PREPARING."""
    order = order_place(customer_id="c", lines=[Line("WIDGET", quantity)], payment_token="tok_visa")
    bus.scope.add(str(order.id))
    run_to_quiet(bus)
    assert Order.objects.get(pk=order.id).status == "CONFIRMED"
    assert shipment_status(order.id) == "PREPARING"
    return str(order.id)


def post_return(order_id: str):
    return Client().post(f"/api/orders/{order_id}/return/")


def sent_after_confirmation(order_id: str) -> list[str]:
    types = OutboxMessage.objects.filter(correlation_id=order_id).order_by("id").values_list("event_type", flat=True)
    types = list(types)
    return types[types.index("shipping.shipment.created") + 1 :]


def transitions(order_id: str) -> list[tuple[str, str, str]]:
    saga = sagas.instance_of(NAME, order_id)
    return list(saga.transitions.order_by("version").values_list("from_state", "to_state", "cause"))


def test_a_confirmed_order_is_returned_its_parcel_stopped_its_stock_back_its_total_refunded(bus):
    order_id = confirmed(bus)
    assert stock("WIDGET") == 3

    response = post_return(order_id)
    assert response.status_code == 202
    assert response.json()["status"] == "RETURNING"
    again = post_return(order_id)  # while it is returning
    assert (again.status_code, again.json()["detail"]) == (409, "The order is RETURNING and cannot be returned.")
    run_to_quiet(bus)

    assert Order.objects.get(pk=order_id).status == "RETURNED"
    assert ledger(order_id) == [("charge", Decimal("20.00")), ("refund", Decimal("20.00"))]
    assert stock("WIDGET") == 5
    assert Reservation.objects.get(order_id=order_id).status == "returned"
    assert shipment_status(order_id) == "CANCELLED"
    assert sent_after_confirmation(order_id) == [
        *RETURN_STEPS,
        "payments.payment.refunded",
        "orders.order.returned",
    ]
    returned = OutboxMessage.objects.get(correlation_id=order_id, event_type="orders.order.returned")
    assert returned.payload == {"order_id": order_id, "amount": "20.00", "currency": "USD"}
    assert transitions(order_id) == [
        ("started", R.BOOKING_PICKUP, "orders.order.return_requested"),
        (R.BOOKING_PICKUP, R.RESTOCKING, "shipping.shipment.cancelled"),
        (R.RESTOCKING, R.REFUNDING, "inventory.stock.restocked"),
        (R.REFUNDING, R.RETURNED, "payments.payment.refunded"),
    ]
    assert not [(d.consumer, d.envelope.routing_key, o) for d, o in bus.outcomes if o is not Outcome.HANDLED]
    third = post_return(order_id)
    assert (third.status_code, third.json()["detail"]) == (409, "The order is RETURNED and cannot be returned.")
    assert post_return(str(uuid.uuid4())).status_code == 404


def test_a_dispatched_parcel_has_its_pickup_booked(bus):
    order_id = confirmed(bus, quantity=1)
    shipments = apps.get_model("shipping", "Shipment").objects
    shipments.filter(order_id=order_id).update(status="DISPATCHED")  # as the operator's dispatch leaves it

    assert post_return(order_id).status_code == 202
    run_to_quiet(bus)

    assert Order.objects.get(pk=order_id).status == "RETURNED"
    assert shipment_status(order_id) == "RETURN_REQUESTED"
    assert (R.BOOKING_PICKUP, R.RESTOCKING, "shipping.shipment.return_requested") in transitions(order_id)
    assert stock("WIDGET") == 5


def test_a_refund_payments_refuses_compensates_the_return_in_reverse(bus):
    order_id = confirmed(bus)
    # payments no longer holds the charge (refunded by other means): it refuses the return's refund
    Payment.objects.filter(order_id=order_id).update(status="refunded")

    assert post_return(order_id).status_code == 202
    run_to_quiet(bus)

    assert Order.objects.get(pk=order_id).status == "CONFIRMED"
    assert ledger(order_id) == [("charge", Decimal("20.00"))]
    assert stock("WIDGET") == 3  # restocked, then taken back out
    assert Reservation.objects.get(order_id=order_id).status == "reserved"
    assert shipment_status(order_id) == "PREPARING"  # the stopped parcel prepared again
    assert sent_after_confirmation(order_id) == [
        *RETURN_STEPS,
        "payments.refund.refused",
        "orders.return.take_back_stock",
        "inventory.stock.taken_back",
        "orders.return.cancel_pickup",
        "shipping.shipment.reinstated",
        "orders.order.return_refused",
    ]
    refused = OutboxMessage.objects.get(correlation_id=order_id, event_type="orders.order.return_refused")
    assert refused.payload == {"order_id": order_id, "reason": "refund_refused"}
    saga = sagas.instance_of(NAME, order_id)
    assert (saga.state, saga.failure_reason) == (R.NOT_RETURNED, "refund_refused")
    assert [t[1] for t in transitions(order_id)] == [
        *(R.BOOKING_PICKUP, R.RESTOCKING, R.REFUNDING),
        *(R.TAKING_BACK_STOCK, R.CANCELLING_PICKUP, R.NOT_RETURNED),
    ]
    again = post_return(order_id)  # CONFIRMED again, but its one return saga has ended
    assert (again.status_code, again.json()["detail"]) == (
        409,
        "The order's return was refused: it cannot be returned again.",
    )
    assert Order.objects.get(pk=order_id).status == "CONFIRMED"


def test_a_restock_repeated_with_its_step_key_has_no_second_effect(bus):
    order_id = confirmed(bus)
    post_return(order_id)
    run_to_quiet(bus)
    command = OutboxMessage.objects.get(correlation_id=order_id, event_type="orders.return.restock")
    answer = OutboxMessage.objects.get(correlation_id=order_id, event_type="inventory.stock.restocked")
    outbox = OutboxMessage.objects.count()

    # The same step's command again (the same key, another message id), twice.
    for _ in range(2):
        again = forged.message(command.event_type, command.payload)
        assert decide("inventory", routing_key=command.event_type, **again).outcome is Outcome.HANDLED
    assert stock("WIDGET") == 5  # not 7
    assert OutboxMessage.objects.count() == outbox  # nothing new: the first answer, published again
    assert OutboxMessage.objects.get(pk=answer.pk).published_at is None
    run_to_quiet(bus)  # the repeated answer finds the saga past its step: nothing moves
    assert Order.objects.get(pk=order_id).status == "RETURNED"
    assert stock("WIDGET") == 5
    assert len(transitions(order_id)) == 4


def test_a_restock_given_up_then_delivered_after_its_undo_puts_nothing_back(bus):
    order_id = confirmed(bus)
    post_return(order_id)
    bus.relay()
    while not any(d.envelope.routing_key == "orders.return.restock" for d in bus.pending):
        bus.deliver(0)
    attempts = setting("RETURN_STEP_ATTEMPTS")
    for _ in range(attempts):  # inventory is slow: every send of the restock waits in its queue
        assert bus.fire_deadlines(timedelta(seconds=setting("RETURN_STEP_TIMEOUT") + 1)) == 1
        bus.deliver_only("orders", "orders.return.deadline")
    saga = sagas.instance_of(NAME, order_id)
    assert (saga.state, saga.failure_reason) == (R.CANCELLING_PICKUP, "timeout")
    assert saga.step_keys["orders.return.take_back_stock"] == saga.step_keys["orders.return.restock"]

    bus.deliver_only("inventory", "orders.return.take_back_stock")  # the undo overtakes the step
    late = [d for d in bus.pending if (d.consumer, d.envelope.routing_key) == ("inventory", "orders.return.restock")]
    assert len(late) == attempts
    run_to_quiet(bus)  # the restocks arrive late: each runs nothing

    assert stock("WIDGET") == 3  # the return never happened: not 5
    assert Reservation.objects.get(order_id=order_id).status == "reserved"
    assert Order.objects.get(pk=order_id).status == "CONFIRMED"
    assert shipment_status(order_id) == "PREPARING"
    assert sagas.instance_of(NAME, order_id).state == R.NOT_RETURNED
    assert not OutboxMessage.objects.filter(correlation_id=order_id, event_type="inventory.stock.restocked").exists()
    assert ledger(order_id) == [("charge", Decimal("20.00"))]


@pytest.mark.parametrize("token, status", [("tok_chargeDeclined", "FAILED"), ("tok_visa", "PENDING")])
def test_only_a_confirmed_order_can_be_returned(bus, token, status):
    order = order_place(customer_id="c", lines=[Line("WIDGET", 1)], payment_token=token)
    bus.scope.add(str(order.id))
    if status == "FAILED":
        run_to_quiet(bus)
    response = post_return(str(order.id))
    assert (response.status_code, json.loads(response.content)) == (
        409,
        {"code": "invalid_state", "detail": f"The order is {status} and cannot be returned."},
    )
    assert Order.objects.get(pk=order.id).status == status
    assert sagas.instance_of(NAME, str(order.id)) is None


def test_the_operator_reads_a_return_its_transitions_and_its_saga_drawn(bus, staff):
    order_id = confirmed(bus)
    post_return(order_id)
    run_to_quiet(bus)
    saga = sagas.instance_of(NAME, order_id)

    listing = staff.get("/admin/orders/returnsaga/").content.decode()
    assert order_id[:8] in listing
    assert "mermaid" not in listing  # no diagram on the list: Mermaid's 5 MB are not loaded
    response = staff.get(f"/admin/orders/returnsaga/{saga.pk}/change/")
    page = response.content.decode()
    assert page.count("payments.payment.refunded") == 2  # a transition's cause, and the diagram's move
    assert '<pre class="mermaid">stateDiagram-v2\n    [*] --&gt; booking_pickup\n' in page
    assert "refunding --&gt; taking_back_stock : payments.refund.refused (refund_refused)" in page
    # Drawn in the browser by our own static files, Mermaid before its init: no CDN, no inline script.
    assert re.findall(r'<script src="(/static/kernel/mermaid/[^"]+)"></script>', page) == [
        "/static/kernel/mermaid/mermaid.min.js",
        "/static/kernel/mermaid/init.js",
    ]
    assert not re.findall(r"<script(?![^>]*\bsrc=)[^>]*>\s*\S", page)  # every script a file
    assert '<link href="/static/kernel/mermaid/diagram.css" media="all" rel="stylesheet">' in page
    assert "script-src 'self'" in response["Content-Security-Policy"].split("; ")


def test_the_order_s_swimlane_draws_a_compensated_return_in_its_colours(bus, staff):
    order_id = confirmed(bus)
    Payment.objects.filter(order_id=order_id).update(status="refunded")
    post_return(order_id)
    run_to_quiet(bus)

    marks = {
        m["title"].split()[0]: m["classes"] - {"saga-event", "saga-done"} for m in events(swimlane(staff, order_id))
    }
    assert {t: marks[t] for t in sent_after_confirmation(order_id)} == {
        "orders.order.return_requested": {"saga-step"},
        "orders.return.book_pickup": {"saga-step"},
        "shipping.shipment.cancelled": {"saga-compensation"},
        "orders.return.restock": {"saga-step"},
        "inventory.stock.restocked": {"saga-step"},
        "orders.return.refund": {"saga-step"},
        "payments.refund.refused": {"saga-failure"},
        "orders.return.take_back_stock": {"saga-compensation"},
        "inventory.stock.taken_back": {"saga-compensation"},
        "orders.return.cancel_pickup": {"saga-compensation"},
        "shipping.shipment.reinstated": {"saga-compensation"},
        "orders.order.return_refused": {"saga-failure"},
    }
