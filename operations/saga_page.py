"""The saga of one correlation id as an operator's page shows it: a swimlane above its timeline,
where it waits, and, in a split, what this deployment cannot see and where to look. Read through
the bus's public API only; a context's admin gives it the entries and its own words."""

import json
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from django.utils.safestring import mark_safe
from reliable_messaging.operator import (
    Handling,
    TimelineEntry,
    YetToHandle,
    command_in_deployment,
    local_consumers,
    system_consumers,
    timeline_waiting,
    yet_to_handle,
)

from operations.swimlane import saga_swimlane


@dataclass(frozen=True)
class TimelineRow:
    """A timeline entry as the page's table shows it: times relative to the start and to the event."""

    entry: TimelineEntry
    offset: float  # seconds after the saga started
    handled: list[tuple[Handling, float]]  # each handling and its seconds after the event
    yet_to_handle: YetToHandle
    payload_pretty: str

    @classmethod
    def of(cls, entry: TimelineEntry, *, started_at: datetime, yet: YetToHandle) -> "TimelineRow":
        return cls(
            entry=entry,
            offset=(entry.occurred_at - started_at).total_seconds(),
            handled=[(h, (h.handled_at - entry.occurred_at).total_seconds()) for h in entry.handled_by],
            yet_to_handle=yet,
            payload_pretty=json.dumps(entry.payload or {}, indent=2, sort_keys=True),
        )


def saga_view(entries: list[TimelineEntry], *, started_at: datetime, running: bool) -> dict:
    """Template context: each event with its handling, the swimlane, and where the saga waits.
    While it runs (``running``), a context hosted elsewhere answers every event it handles."""
    now = timezone.now()
    waiting = timeline_waiting(entries, now=now, expect_answers=running)
    # operations.swimlane escapes every text it draws.
    picture = mark_safe(saga_swimlane(entries, started_at=started_at, waiting=waiting))  # noqa: S308
    # The table names every consumer yet to answer, a running saga or not (the banner, only the waits).
    yet = yet_to_handle(entries, now=now)
    return {
        "timeline": [TimelineRow.of(e, started_at=started_at, yet=yet[e.message_id]) for e in entries],
        "swimlane": picture,
        "waiting": waiting,
    }


def what_this_deployment_saw(tone: str, headline: str) -> dict:
    """The banner of a saga nothing waits for: its outcome (``tone``, ``headline``), what this
    deployment saw, and, in a split, what it cannot know and the commands to look there."""
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
