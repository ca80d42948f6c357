"""The saga as a picture: the swimlane SVG on the order's admin page, from the real timeline."""

import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging._declarations import installed, names
from reliable_messaging._topology import subscribers_of
from reliable_messaging.models import EventLogEntry, InboxMessage, OutboxMessage

from orders.models import Order

pytestmark = pytest.mark.django_db
SVG = "{http://www.w3.org/2000/svg}"


def swimlane(client: Client, order_id: str) -> ET.Element:
    html = client.get(f"/admin/orders/order/{order_id}/change/").content.decode()
    start = html.rindex("<svg", 0, html.index('class="saga-swimlane"'))
    end = html.index("</svg>", start) + len("</svg>")
    return ET.fromstring(html[start:end])


def events(svg: ET.Element) -> list[dict]:
    return [
        {
            "classes": set(g.get("class").split()),
            "message_id": g.get("data-message-id"),
            "title": g.find(f"{SVG}title").text,
            "y": float(g.find(f"{SVG}circle").get("cy")),
            "x": float(g.find(f"{SVG}circle").get("cx")),
        }
        for g in svg.iter(f"{SVG}g")
        if "saga-event" in (g.get("class") or "")
    ]


def publish_answer(order_id: str, event_type: str, cause: OutboxMessage, after: float, **fields) -> OutboxMessage:
    """An event another context published in answer to ``cause``, as the event log recorded it."""
    at = cause.created_at + timedelta(seconds=after)
    row = OutboxMessage.objects.create(
        source=event_type.split(".")[0],
        event_type=event_type,
        aggregate_type="x",
        aggregate_id=order_id,
        correlation_id=order_id,
        causation_id=str(cause.event_id),
        payload={"order_id": order_id},
        created_at=at,
        published_at=at,
        **fields,
    )
    EventLogEntry.objects.create(
        message_id=str(row.event_id),
        event_type=event_type,
        correlation_id=order_id,
        causation_id=str(cause.event_id),
        occurred_at=at,
        recorded_at=at,
    )
    return row


def test_a_fresh_order_is_one_waiting_mark_in_the_orders_lane(staff, order_id):
    created = OutboxMessage.objects.get(correlation_id=order_id)

    svg = swimlane(staff, order_id)

    [mark] = events(svg)
    assert mark["classes"] == {"saga-event", "saga-step", "saga-waiting"}
    assert mark["message_id"] == str(created.event_id)
    assert "orders.order.created" in mark["title"] and str(created.event_id) in mark["title"]
    assert created.created_at.isoformat() in mark["title"] and "waiting in the outbox" in mark["title"]
    lanes = [t.text for t in svg.iter(f"{SVG}text") if t.get("font-weight") == "600"]
    assert lanes == names(installed())


def test_a_compensated_saga_has_a_lane_per_context_arrows_from_cause_to_effect_and_its_own_colour(staff, order_id):
    now = timezone.now()
    created = OutboxMessage.objects.get(correlation_id=order_id)
    OutboxMessage.objects.filter(pk=created.pk).update(published_at=now)
    charged = publish_answer(order_id, "payments.payment.succeeded", created, 0.03)
    short = publish_answer(order_id, "inventory.stock.reservation_failed", charged, 0.05)
    refunded = publish_answer(order_id, "payments.payment.refunded", short, 0.07)
    failed = publish_answer(order_id, "orders.order.failed", short, 0.06)
    for row in (created, charged, short, refunded, failed):
        for consumer in subscribers_of(row.event_type):  # handled by every consumer bound to it
            InboxMessage.objects.create(consumer=consumer, message_id=str(row.event_id))

    svg = swimlane(staff, order_id)

    marks = events(svg)
    assert [m["message_id"] for m in marks] == [str(r.event_id) for r in (created, charged, short, failed, refunded)]
    kinds = [({"saga-step", "saga-failure", "saga-compensation", "saga-outcome"} & m["classes"]).pop() for m in marks]
    assert kinds == ["saga-step", "saga-step", "saga-failure", "saga-failure", "saga-compensation"]
    assert all("saga-done" in m["classes"] for m in marks)
    lane_y = {m["message_id"]: m["y"] for m in marks}
    assert lane_y[str(created.event_id)] == lane_y[str(failed.event_id)]  # both in the orders lane
    assert lane_y[str(charged.event_id)] == lane_y[str(refunded.event_id)] != lane_y[str(short.event_id)]
    assert [m["x"] for m in marks] == sorted(m["x"] for m in marks)  # time left to right
    arrows = [p.find(f"{SVG}title").text for p in svg.iter(f"{SVG}path") if p.get("class") == "saga-cause"]
    assert sorted(arrows) == sorted(
        [
            "orders.order.created caused payments.payment.succeeded",
            "payments.payment.succeeded caused inventory.stock.reservation_failed",
            "inventory.stock.reservation_failed caused orders.order.failed",
            "inventory.stock.reservation_failed caused payments.payment.refunded",
        ]
    )


def dead_letter_at_payments(order_id: str):
    """The order's ``orders.order.created``, published, and dead-lettered by payments."""
    created = OutboxMessage.objects.get(correlation_id=order_id)
    OutboxMessage.objects.filter(pk=created.pk).update(published_at=timezone.now())
    return dead_letter_record(
        consumer="payments",
        body=b"{}",
        properties={"message_id": str(created.event_id), "correlation_id": order_id},
        headers={"event_type": "orders.order.created"},
        routing_key="orders.order.created",
        reason="handler_error",
        error="TransientError: gateway unavailable",
    )


def test_a_dead_lettered_handling_is_drawn_in_the_failing_consumers_lane(staff, order_id):
    letter = dead_letter_at_payments(order_id)

    svg = swimlane(staff, order_id)

    [dead] = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "saga-dead-letter"]
    assert dead.find(f"{SVG}title").text == f"dead letter #{letter.pk} at payments: handler_error"
    [mark] = events(svg)
    assert "saga-waiting" in mark["classes"]  # events and orders have not handled it either
    assert "not yet handled by events" in mark["title"]


def test_an_ended_order_with_a_dead_letter_says_it_ended_not_that_it_waits(staff, order_id):
    created = dead_letter_at_payments(order_id).message_id
    for consumer in subscribers_of("orders.order.created"):
        if consumer != "payments":
            InboxMessage.objects.create(consumer=consumer, message_id=created)
    page = staff.get(f"/admin/orders/order/{order_id}/change/").content.decode()
    assert "Waiting at 1 place" in page  # PENDING: the saga waits there

    Order.objects.filter(pk=order_id).update(status=Order.Status.FAILED, failure_reason="timeout")
    page = staff.get(f"/admin/orders/order/{order_id}/change/").content.decode()
    assert "Waiting at" not in page
    assert "The order has ended, but 1 message still needs an operator:" in page
