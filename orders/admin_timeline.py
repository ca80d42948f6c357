"""The saga timeline as the order's admin page shows it (read through reliable_messaging.api)."""

import json
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from django.utils.safestring import mark_safe
from reliable_messaging.operator import (
    Handling,
    TimelineEntry,
    WaitingPlace,
    YetToHandle,
    command_in_deployment,
    local_consumers,
    system_consumers,
    timeline_waiting,
    yet_to_handle,
)

from orders.models import Order
from orders.selectors import order_timeline
from orders.swimlane import saga_swimlane


@dataclass(frozen=True)
class TimelineRow:
    """A timeline entry as the page's table shows it: times relative to checkout and to the event."""

    entry: TimelineEntry
    offset: float  # seconds after checkout
    handled: list[tuple[Handling, float]]  # each handling and its seconds after the event
    yet_to_handle: YetToHandle
    payload_pretty: str

    @classmethod
    def of(cls, entry: TimelineEntry, *, checkout_at: datetime, yet: YetToHandle) -> "TimelineRow":
        return cls(
            entry=entry,
            offset=(entry.occurred_at - checkout_at).total_seconds(),
            handled=[(h, (h.handled_at - entry.occurred_at).total_seconds()) for h in entry.handled_by],
            yet_to_handle=yet,
            payload_pretty=json.dumps(entry.payload or {}, indent=2, sort_keys=True),
        )


def order_saga_view(order: Order) -> dict:
    """Template context: each event with its handling, and where the saga is waiting."""
    now = timezone.now()
    entries = order_timeline(order=order, detailed=True)
    # While the saga runs, a context hosted elsewhere answers every event it handles with one.
    running = order.status == Order.Status.PENDING
    waiting = timeline_waiting(entries, now=now, expect_answers=running)
    # orders.swimlane escapes every text it draws.
    picture = mark_safe(saga_swimlane(entries, started_at=order.created_at, waiting=waiting))  # noqa: S308
    # The table names every consumer yet to answer, a running saga or not (the banner, only the waits).
    yet = yet_to_handle(entries, now=now)
    return {
        "outcome": saga_outcome(order, waiting),
        "timeline": [TimelineRow.of(e, checkout_at=order.created_at, yet=yet[e.message_id]) for e in entries],
        "swimlane": picture,
        "waiting": waiting,
        "order_age": (now - order.created_at).total_seconds(),
        "pending": order.status == Order.Status.PENDING,
    }


# The banner's colour and words per final status: only a confirmed order is good news.
OUTCOME_WORDS = {
    Order.Status.CONFIRMED: ("ok", "The saga is complete: the order is confirmed"),
    Order.Status.FAILED: ("failed", "The saga has ended: the order failed, no sale"),
    Order.Status.CANCELLED: ("cancelled", "The saga has ended: the order was cancelled"),
}


def saga_outcome(order: Order, waiting: list[WaitingPlace]) -> dict | None:
    """What the banner says of an order nothing waits for: its outcome, what this deployment
    saw, and, in a split, what it cannot know and where to look. None while anything waits
    or the order is still PENDING (the banner lists the waits instead)."""
    if waiting or order.status == Order.Status.PENDING:
        return None
    tone, headline = OUTCOME_WORDS[order.status]
    here = local_consumers()
    elsewhere = [c for c in system_consumers() if c not in here]
    if not elsewhere:
        known = "every event published and handled by every subscribed consumer."
        return {"tone": tone, "headline": headline, "known": known}
    return {
        "tone": tone,
        "headline": headline,
        "known": f"every event published and handled by this deployment's consumers ({', '.join(here)}).",
        # A handling that caused no event (an ignored duplicate, a refund of nothing) leaves no trace here.
        "unknown": (
            f"{', '.join(elsewhere)} run in other deployments: this one sees only the events they caused, "
            "not their inboxes or dead letters. To look there:"
        ),
        "commands": [command_in_deployment(c, "dead_letters", "list", "--consumer", c) for c in elsewhere],
    }
