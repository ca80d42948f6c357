"""Orders' part of the operator's views: its gauges on ``/metrics`` and its overview section.

Registered from ``OrdersConfig.ready()`` through the kernel, so the composition root shows
them only in a deployment that hosts orders.
"""

import uuid
from datetime import datetime, timedelta

from django.urls import reverse
from django.utils.safestring import mark_safe
from prometheus_client.core import GaugeMetricFamily

from kernel.charts import stacked_bars
from kernel.operations import (
    OverviewSection,
    register_correlation_link,
    register_database_gauges,
    register_overview_section,
)
from orders.conf import setting
from orders.monitoring import (
    orders_pending_longer_than,
    orders_pending_summary,
    orders_per_minute,
    orders_status_counts,
)

STUCK_AFTER = 60.0  # seconds an order may stay PENDING before it counts as stuck
STUCK_LISTED = 50
OUTCOME_COLORS = {"CONFIRMED": "#2e7d32", "FAILED": "#c62828", "CANCELLED": "#ef6c00", "PENDING": "#90a4ae"}


def pending_order_gauges():
    pending = orders_pending_summary(stuck_after=STUCK_AFTER)
    yield GaugeMetricFamily("orders_pending", "Orders in PENDING.", value=pending.pending)
    yield GaugeMetricFamily(
        "orders_pending_stuck", f"Orders PENDING for longer than {STUCK_AFTER:.0f}s.", value=pending.stuck
    )
    yield GaugeMetricFamily(
        "orders_oldest_pending_age_seconds",
        "Age of the oldest PENDING order (0 when none).",
        value=pending.oldest_age,
    )
    yield GaugeMetricFamily(
        "orders_saga_timeout_seconds",
        "SAGA_TIMEOUT: how long an order may stay PENDING before the deadline loop fails it.",
        value=setting("SAGA_TIMEOUT"),
    )


def overview_context(now: datetime) -> dict:
    stuck = orders_pending_longer_than(seconds=STUCK_AFTER)
    minutes, per_minute = orders_per_minute(until=now)
    chart = stacked_bars(
        buckets=minutes,
        series={status: per_minute[status] for status in OUTCOME_COLORS},
        colors=OUTCOME_COLORS,
        title="Orders per minute of checkout, by outcome (last hour)",
    )
    return {
        "chart": mark_safe(chart),  # noqa: S308 - kernel.charts escapes every text it draws
        "orders_last_hour": orders_status_counts(since=now - timedelta(hours=1)),
        "stuck_count": stuck.count(),
        "stuck_orders": [{"order": o, "age": (now - o.created_at).total_seconds()} for o in stuck[:STUCK_LISTED]],
        "stuck_after": int(STUCK_AFTER),
    }


def order_admin_url(correlation_id: str) -> str | None:
    """The order's admin page, for a correlation id that is an order id (catalogue events use a SKU)."""
    try:
        order_id = uuid.UUID(correlation_id)
    except ValueError:
        return None
    return reverse("admin:orders_order_change", args=[order_id])


def register() -> None:
    from orders import metrics  # noqa: F401 - the saga outcome counters exist in every process

    register_database_gauges("orders", pending_order_gauges)
    register_overview_section(OverviewSection("orders", "admin/orders/overview_section.html", overview_context))
    register_correlation_link(order_admin_url)
