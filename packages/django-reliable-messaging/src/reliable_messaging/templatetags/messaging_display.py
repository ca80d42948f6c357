"""Template filters for the operator pages (the bus's admin and the project's alike)."""

import uuid
from datetime import UTC, datetime

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

register = template.Library()


def format_duration(seconds: float) -> str:
    """``42s``, ``3m 05s``, ``2h 07m``, ``3d 04h``: two units at most, as an operator says an age."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


@register.filter
def age(seconds: float | None) -> str:
    """Seconds as a short age: ``42s``, ``3m 05s``, ``2h 07m``, ``3d 04h``."""
    return "-" if seconds is None else format_duration(seconds)


# The longest SKU: a longer value in an id's place is an opaque id from outside (a dead letter's).
LONGEST_NAME = 64


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


@register.filter
def short(value: object) -> str:
    """An id as its last eight characters, the whole id on hover (as in the admin's lists).

    The last ones: a time-ordered UUID (version 7, the message ids) begins with its timestamp,
    so ids of one minute share their first eight characters; their ends are random. Only ids
    are shortened: a SKU in the same column (a catalogue event's aggregate) is a name, whole."""
    text = str(value or "")
    if not _is_uuid(text) and len(text) <= LONGEST_NAME:
        return text or "-"
    return format_html('<span class="ops-mono nowrap" title="{}">…{}</span>', text, text[-8:])


@register.filter
def compact_time(value: datetime | None) -> str:
    """``2026-11-23 22:14:01`` in UTC (the one format of every page; it wraps between date and
    time in a narrow column), the full timestamp on hover."""
    if value is None:
        return "-"
    value = value.astimezone(UTC)
    return format_html(
        '<span title="{}"><span class="nowrap">{}</span> <span class="nowrap">{}</span></span>',
        value.isoformat(),
        value.strftime("%Y-%m-%d"),
        value.strftime("%H:%M:%S"),
    )


@register.filter
def breakable_key(value: object) -> str:
    """A routing key that may wrap after its dots (``context.<wbr>aggregate.<wbr>event``),
    never cut: narrow columns wrap it instead of scrolling sideways."""
    parts = str(value or "").split(".")
    return format_html_join(mark_safe(".<wbr>"), "{}", ((part,) for part in parts)) if value else "-"
