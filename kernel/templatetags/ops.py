"""Template filters for the operator pages."""

from django import template
from django.utils.html import format_html

register = template.Library()


@register.filter
def age(seconds) -> str:
    """Seconds as a short age: ``42s``, ``3m 05s``, ``2h 07m``, ``3d 4h``."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


@register.filter
def short(value) -> str:
    """An id as its first eight characters, the whole id on hover (as in the admin's lists)."""
    text = str(value or "")
    if len(text) <= 12:
        return text or "-"
    return format_html('<span class="ops-mono" title="{}">{}…</span>', text, text[:8])
