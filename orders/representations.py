"""The order as the API shows it: one representation for the API and for checkout's stored answer.

Built by hand: checkout renders it on every request, and DRF's field machinery cost more than
the queries. ``apis.OrderOutputSerializer`` documents it, and a test keeps both equal.
"""

from datetime import UTC, datetime

from reliable_messaging.operator import TimelineEntry

from orders.models import Order
from orders.selectors import order_timeline


def order_representation(order: Order, *, lines=None, timeline: list[TimelineEntry] | None = None) -> dict:
    """``lines`` and ``timeline`` are read unless given (checkout knows them for a new order)."""
    lines = order.lines.all() if lines is None else lines
    timeline = order_timeline(order=order) if timeline is None else timeline
    return {
        "id": str(order.id),
        "status": order.status,
        "failure_reason": order.failure_reason,
        "customer_id": order.customer_id,
        "saga_style": order.saga_style,
        "ship_to": order.ship_to or None,
        "total": _money(order.total),
        "currency": order.currency,
        "items": [
            {"sku": line.sku, "quantity": line.quantity, "unit_price": _money(line.unit_price)} for line in lines
        ],
        "created_at": _time(order.created_at),
        "updated_at": _time(order.updated_at),
        "timeline": [
            {
                "event_type": entry.event_type,
                "message_id": entry.message_id,
                "occurred_at": _time(entry.occurred_at),
                "published_at": _time(entry.published_at),
                "source": entry.source,
                "causation_id": entry.causation_id,
                "state": entry.state,
            }
            for entry in timeline
        ],
    }


def _money(value) -> str:
    return f"{value:.2f}"


def _time(value: datetime | None) -> str | None:
    """As DRF renders a datetime: ISO 8601 in UTC, with ``Z``."""
    if value is None:
        return None
    text = value.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
