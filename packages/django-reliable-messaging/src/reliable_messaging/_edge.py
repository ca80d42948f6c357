"""Reading what arrives from the broker: every header and body is hostile until checked.

Whoever can publish to the vhost chooses each header's type and value: a number may arrive as a
string, a list, a negative or 2^40; an instant as year 10000; a body as 100,000 ``[``. What a
consumer cannot read is refused here with a reason (the message becomes a dead letter), so that
nothing past this module meets a value outside the range it was built for (a retry-delay index,
an integer column, a date a page formats) and no value can raise out of the consumer loop.
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from reliable_messaging._json_depth import nested_deeper_than

ATTEMPT_HEADER = "x-attempt"
# No retry budget comes near this; a larger attempt is not one of ours.
MAX_ATTEMPT = 1000
MAX_SCHEMA_VERSION = 1000
_ROUTING_KEY = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)+")
# Every event of the system nests a few levels; Python's json (and everything that walks the
# value afterwards) recurses once per level and fails near 1,000.
MAX_BODY_DEPTH = 32
# An instant outside this window is no event of this system's: stored, it would break every
# page that formats it (year 10000 has no ISO form Python can print).
EARLIEST_INSTANT = datetime(2000, 1, 1, tzinfo=UTC)
CLOCK_SKEW = timedelta(days=1)
# The largest count a dead letter keeps (its column is a 32-bit integer).
MAX_COUNT = 1_000_000


class InvalidMessage(Exception):
    """A message that can never be handled as it is; ``reason`` is a short machine code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def plain_int(value: object) -> int | None:
    """``value`` when it is an integer (not a bool, which Python counts as one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def event_type_checked(event_type: str) -> str:
    """A routing key of the system's shape (``context.entity.event``, words of letters, digits,
    ``_`` and ``-``), at most 200 characters; ``invalid_headers`` otherwise."""
    if len(event_type) > 200 or not _ROUTING_KEY.fullmatch(event_type):
        raise InvalidMessage("invalid_headers", f"event_type is not a routing key: {_shown(event_type)}")
    return event_type


def schema_version_of(headers: dict[str, Any]) -> int:
    """The schema version (1 without the header): an integer, or its digits, from 1 to
    ``MAX_SCHEMA_VERSION``; ``invalid_schema_version`` otherwise."""
    value = headers.get("schema_version", 1)
    version = plain_int(value)
    if version is None and isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 6:
        version = int(value)
    if version is None or not 1 <= version <= MAX_SCHEMA_VERSION:
        raise InvalidMessage("invalid_schema_version", f"schema_version {_shown(value)}")
    return version


def attempt_of(headers: dict[str, Any]) -> int:
    """The delivery's attempt number (1 without the header); ``invalid_headers`` unless it is an
    integer from 1 to ``MAX_ATTEMPT``: only this project's retries set it, always so."""
    if ATTEMPT_HEADER not in headers:
        return 1
    attempt = plain_int(headers[ATTEMPT_HEADER])
    if attempt is None or not 1 <= attempt <= MAX_ATTEMPT:
        shown = _shown(headers[ATTEMPT_HEADER])
        raise InvalidMessage("invalid_headers", f"{ATTEMPT_HEADER} must be an integer from 1 to {MAX_ATTEMPT}: {shown}")
    return attempt


def occurred_at_of(headers: dict[str, Any]) -> str:
    """The ``occurred_at`` header as an ISO-8601 instant ("" without one); ``invalid_headers``
    when it is not an instant with its offset, or falls outside [2000, now + a day]."""
    value = headers.get("occurred_at")
    if value is None or value == "":
        return ""
    instant = instant_within_window(value)
    if instant is None:
        raise InvalidMessage(
            "invalid_headers",
            f"occurred_at must be an ISO-8601 instant with its offset from {EARLIEST_INSTANT:%Y-%m-%d} "
            f"to now + {CLOCK_SKEW}: {_shown(value)}",
        )
    return instant.isoformat()


def instant_within_window(value: object) -> datetime | None:
    """``value`` as an aware UTC datetime when it is an ISO-8601 instant with its offset inside
    [2000, now + a day]; None for anything else."""
    try:
        instant = parse_datetime(value) if isinstance(value, str) else None
        # 9999-12-31T23:59:59-14:00 is in year 10000 in UTC: OverflowError.
        instant = instant.astimezone(UTC) if instant is not None and instant.tzinfo is not None else None
    except (ValueError, OverflowError):  # well formed but impossible (a 30 February, an hour 25)
        return None
    if instant is None or not EARLIEST_INSTANT <= instant <= timezone.now() + CLOCK_SKEW:
        return None
    return instant


def refuse_deep_body(body: bytes) -> None:
    """``invalid_payload`` for a body nested deeper than any event (before it is parsed), or
    holding a NUL (JSON ``\\u0000``), which no PostgreSQL text or jsonb can store."""
    if nested_deeper_than(body, MAX_BODY_DEPTH):
        raise InvalidMessage("invalid_payload", f"the body nests deeper than {MAX_BODY_DEPTH} levels")
    if b"\\u0000" in body:
        raise InvalidMessage("invalid_payload", "the body holds a NUL character (\\u0000)")


def refuse_unstorable(*ids: object) -> None:
    """``invalid_headers`` for an id (message, correlation, causation) holding a NUL: the inbox
    could not store it, and the message would fail every attempt for no fault of its handler."""
    for value in ids:
        if isinstance(value, str) and "\x00" in value:
            raise InvalidMessage("invalid_headers", f"an id holds a NUL character: {_shown(value)}")


def clamped_count(value: object, default: int = 1) -> int:
    """A count read from a header, for a column: ``default`` unless a positive integer, at most
    ``MAX_COUNT``."""
    count = plain_int(value)
    if count is None or count < 1:
        return default
    return min(count, MAX_COUNT)


@dataclass(frozen=True)
class Death:
    """What RabbitMQ's ``x-death`` header says of a dead-lettered message, as far as it can be read.

    RabbitMQ writes a list of tables, newest first; a forged one may be anything. ``note`` says
    what could not be read (empty when all of it could)."""

    reason: str
    queue: str
    routing_key: str
    count: int
    note: str = ""


def death_of(headers: dict[str, Any], *, default_queue: str, default_routing_key: str) -> Death:
    deaths = headers.get("x-death")
    first = deaths[0] if isinstance(deaths, list | tuple) and deaths else None
    if not isinstance(first, dict):
        note = "" if deaths is None else f"x-death unreadable: {_shown(deaths)}"
        return Death("dead_lettered", default_queue, default_routing_key, 1, note)
    unread = []

    def text(key: str, default: str) -> str:
        value = first.get(key)
        if isinstance(value, bytes):
            value = value.decode("utf-8", errors="backslashreplace")
        if isinstance(value, str) and value:
            return value[:200]
        if value is not None:
            unread.append(key)
        return default

    keys = first.get("routing-keys")
    routing_key = keys[0] if isinstance(keys, list | tuple) and keys and isinstance(keys[0], str) else None
    if routing_key is None and keys is not None:
        unread.append("routing-keys")
    count = clamped_count(first.get("count"), default=0)
    if count == 0 and first.get("count") is not None:
        unread.append("count")
    elif plain_int(first.get("count")) is not None and first["count"] > MAX_COUNT:
        unread.append(f"count (clamped to {MAX_COUNT})")
    return Death(
        reason=text("reason", "dead_lettered"),
        queue=text("queue", default_queue),
        routing_key=(routing_key or default_routing_key)[:255],
        count=count or 1,
        note=f"x-death fields unreadable: {', '.join(unread)}" if unread else "",
    )


def _shown(value: object) -> str:
    """A hostile value for a log line or a dead letter's error: its type and a short repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"
