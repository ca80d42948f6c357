"""The saga timeline as the order's admin page shows it (read through messaging.api)."""

import json

from django.utils import timezone
from django.utils.safestring import mark_safe

from messaging.api import timeline_waiting
from orders.models import Order
from orders.selectors import order_timeline
from orders.swimlane import saga_swimlane


def order_saga_view(order: Order) -> dict:
    """Template context: each event with its handling, and where the saga is waiting."""
    now = timezone.now()
    entries = order_timeline(order=order, detailed=True)
    # While the saga runs, a context hosted elsewhere answers every event it handles with one.
    running = order.status == Order.Status.PENDING
    waiting = timeline_waiting(entries, now=now, expect_answers=running)
    # orders.swimlane escapes every text it draws.
    picture = mark_safe(saga_swimlane(entries, started_at=order.created_at, expect_answers=running))  # noqa: S308
    for entry in entries:
        entry["offset"] = (entry["occurred_at"] - order.created_at).total_seconds()
        entry["payload_pretty"] = json.dumps(entry.get("payload") or {}, indent=2, sort_keys=True)
        for handled in entry["handled_by"]:
            handled["after"] = (handled["handled_at"] - entry["occurred_at"]).total_seconds()
    return {
        "timeline": entries,
        "swimlane": picture,
        "waiting": waiting,
        "order_age": (now - order.created_at).total_seconds(),
        "pending": order.status == Order.Status.PENDING,
    }
