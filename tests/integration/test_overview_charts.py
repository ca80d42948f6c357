"""The operator overview's charts and the figures behind them, over the last hour (the outbox's
backlog history itself: the bus's own tests, test_backlog_history.py)."""

import xml.etree.ElementTree as ET
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging.models import OutboxMessage

from orders.models import Order
from orders.monitoring import orders_per_minute

pytestmark = pytest.mark.django_db


def row(created, published=None, parked=None) -> OutboxMessage:
    return OutboxMessage.objects.create(
        source="orders",
        event_type="orders.order.created",
        aggregate_type="order",
        aggregate_id="x",
        correlation_id="x",
        payload={},
        created_at=created,
        published_at=published,
        parked_at=parked,
    )


def test_orders_per_minute_counts_each_minute_of_checkout_by_the_status_now():
    now = timezone.now().replace(second=40, microsecond=0)
    for minutes_ago, status in [
        (0, "PENDING"),
        (3, "CONFIRMED"),
        (3, "CONFIRMED"),
        (3, "FAILED"),
        (59, "CANCELLED"),
        (61, "CONFIRMED"),
    ]:
        order = Order.objects.create(customer_id="c", total=Decimal("1.00"), currency="USD", status=status)
        Order.objects.filter(pk=order.pk).update(created_at=now - timedelta(minutes=minutes_ago))

    minutes, series = orders_per_minute(until=now)

    assert len(minutes) == 60 and minutes[-1] == now.replace(second=0)
    assert series["CONFIRMED"][-4] == 2 and series["FAILED"][-4] == 1 and series["PENDING"][-1] == 1
    assert series["CANCELLED"][0] == 1
    assert sum(sum(counts) for counts in series.values()) == 5  # 61 minutes ago is outside the hour


def test_the_overview_draws_orders_per_minute_the_outbox_history_and_dead_letters_by_consumer():
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "x"))
    Order.objects.create(customer_id="c", total=Decimal("1.00"), currency="USD", status="CONFIRMED")
    row(timezone.now() - timedelta(minutes=3))
    for _ in range(2):
        dead_letter_record(
            consumer="inventory", body=b"{}", properties={}, headers={}, routing_key="", reason="invalid_payload"
        )

    html = client.get("/admin/overview/").content.decode()

    charts = {}
    for chart_id in ("orders-per-minute", "outbox-history", "dead-letters-chart"):
        start = html.index("<svg", html.index(f'id="{chart_id}"'))
        charts[chart_id] = ET.fromstring(html[start : html.index("</svg>", start) + len("</svg>")])
    titles = {key: [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")] for key, svg in charts.items()}
    assert any(t.endswith(": 1 CONFIRMED") for t in titles["orders-per-minute"])
    assert any(t.endswith(": 1 row") for t in titles["outbox-history"])
    assert "inventory: 2 waiting" in titles["dead-letters-chart"]
