"""A saga's timeline as typed values: what ``selectors.timeline_for`` reads and
``diagnosis.timeline_waiting`` and ``diagnosis.yet_to_handle`` read off it.

Plain dataclasses, so the admin's templates, DRF's serializers and the swimlane read the same
attributes, and a misspelt field is an error where it is written rather than a silent default.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Handling:
    """A consumer that handled the entry: its inbox row here, or, for a consumer hosted in
    another deployment, the event it published in answer (``caused``)."""

    consumer: str
    handled_at: datetime
    caused: str | None = None


@dataclass(frozen=True)
class DeadLetterMark:
    """A dead letter of the entry at one of this deployment's consumers."""

    id: int
    consumer: str
    reason: str
    error: str = ""
    replayed_at: datetime | None = None


@dataclass
class TimelineEntry:
    """One event of a saga, one per message id, published or still in the outbox.

    ``handled_by`` and ``dead_letters`` are filled by a detailed read.
    """

    event_type: str
    message_id: str
    occurred_at: datetime
    published_at: datetime | None
    source: str
    causation_id: str | None
    state: str  # pending, published, parked, or scheduled (publish(deliver_at=...), not due yet)
    payload: dict[str, Any] | None = None  # masked; None where it is not read (a new event)
    attempts: int = 0
    last_error: str = ""
    handled_by: list[Handling] = field(default_factory=list)
    dead_letters: list[DeadLetterMark] = field(default_factory=list)


@dataclass(frozen=True)
class YetToHandle:
    """The consumers subscribed to an entry with no sign of having handled it (nor a dead letter):
    ``awaiting``, this deployment's; ``elsewhere``, hosted in another deployment."""

    awaiting: list[str] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WaitingPlace:
    """One place a saga waits: ``kind`` is pending, parked, unhandled, dead_letter or elsewhere.

    ``command`` is what to run in the deployment that can see more (for ``elsewhere``)."""

    kind: str
    event_type: str
    message_id: str
    since: datetime
    age: float  # seconds
    detail: str
    consumer: str | None = None
    dead_letter_id: int | None = None
    command: str = ""
