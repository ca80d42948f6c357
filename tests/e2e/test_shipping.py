"""Shipping follows the saga without ever answering it: a shipment per confirmed order,
cancelled or returned with the order, dispatched once by an operator from the admin.

Here the saga runs as the Procfile starts its processes on PostgreSQL and RabbitMQ; shipping's
own integration tests (shipping/tests/integration/) call its services and handlers directly, for the orders in which
messages can arrive (late, twice, a cancellation before its confirmation).
"""

import uuid

import pytest
from django.contrib.auth.models import User
from django.test import Client
from reliable_messaging.models import OutboxMessage

from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import check_invariants, wait_quiet
from faultlib.processes import procfile_commands, wait_until
from faultlib.saga import CATALOG, asserted, checkout, seed_catalog, wait_terminal
from tests.support.waits import wait_for_events


def timeline(client: Client, order_id: str) -> list[str]:
    """The timeline's events of the participants and shipping (a follower added later has its own tests)."""
    return asserted([e["event_type"] for e in client.get(f"/api/orders/{order_id}/").json()["timeline"]], "shipping")


def wait_for_event(client: Client, order_id: str, event_type: str) -> list[str]:
    wait_until(lambda: event_type in timeline(client, order_id), timeout=30, message=f"{event_type} in the timeline")
    return timeline(client, order_id)


def dispatch_from_admin(staff: Client, *orders: str) -> list[str]:
    """Select the orders' shipments in the admin list, run the action; the messages it shows."""
    from shipping.models import Shipment

    ids = [str(s.pk) for s in Shipment.objects.filter(order_id__in=orders)]
    response = staff.post("/admin/shipping/shipment/", {"action": "dispatch", "_selected_action": ids}, follow=True)
    assert response.status_code == 200
    return [str(m) for m in response.context["messages"]]


@pytest.mark.needs_contexts("shipping")
@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_the_saga_with_shipping_as_the_procfile_runs_it(processes, quiet_broker):
    from shipping.models import Shipment  # here: a tree without shipping still collects this module

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
    # Its three answers come independently (the refund from the gateway worker): wait for all three.
    answers = ["inventory.stock.released", "payments.payment.refunded", "shipping.shipment.cancelled"]
    after = wait_for_events(lambda: timeline(client, cancelled), answers, timeout=60, what="the cancellation's answers")
    assert after[5] == "orders.order.cancelled"
    assert sorted(after[6:]) == answers
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
    assert {o: client.get(f"/api/orders/{o}/").json()["status"] for o in (kept, cancelled, returned, declined)} == {
        kept: "CONFIRMED",
        cancelled: "CANCELLED",
        returned: "CANCELLED",
        declined: "FAILED",
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
        ("orders.order.created", 4),
        ("orders.order.failed", 1),
        ("payments.payment.failed", 1),
        ("payments.payment.refunded", 1),
        ("payments.payment.succeeded", 1),
        ("shipping.shipment.cancelled", 1),
        ("shipping.shipment.created", 1),
        ("shipping.shipment.dispatched", 1),
        ("shipping.shipment.return_requested", 1),
    ]
