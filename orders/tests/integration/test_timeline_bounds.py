"""An order's pages stay small and quick whatever is published about it: 5,000 events seen on the
bus under one real order's id (forgeries naming it) leave its API page and its admin page bounded."""

import time
import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from reliable_messaging.models import EventLogEntry

pytestmark = pytest.mark.django_db
FORGED = 5_000
LIMIT = 200  # reliable_messaging._selectors.TIMELINE_LIMIT


def forge(order_id: str) -> None:
    start = timezone.now()
    EventLogEntry.objects.bulk_create(
        EventLogEntry(
            message_id=str(uuid.uuid4()),
            event_type="shipping.shipment.cancelled",
            correlation_id=order_id,
            occurred_at=start + timedelta(milliseconds=n),
            payload={"order_id": order_id, "reason": "x" * 100},
        )
        for n in range(FORGED)
    )


def test_the_api_page_shows_the_first_events_and_stays_small(order_id):
    forge(order_id)
    response = Client().get(f"/api/orders/{order_id}/")
    assert response.status_code == 200
    timeline = response.json()["timeline"]
    assert len(timeline) == LIMIT
    assert timeline[0]["event_type"] == "orders.order.created"  # the order's own first event is kept
    assert len(response.content) < 100_000


def test_the_admin_page_stays_small_and_quick(staff, order_id):
    forge(order_id)
    started = time.monotonic()
    response = staff.get(f"/admin/orders/order/{order_id}/change/")
    assert response.status_code == 200
    assert time.monotonic() - started < 5.0
    assert len(response.content) < 1_500_000
