"""Template filters for the operator pages."""

from django import template
from django.utils.html import format_html

from kernel.charts import format_duration

register = template.Library()


@register.filter
def age(seconds) -> str:
    """Seconds as a short age: ``42s``, ``3m 05s``, ``2h 07m``, ``3d 04h``."""
    return "-" if seconds is None else format_duration(seconds)


@register.filter
def short(value) -> str:
    """An id as its first eight characters, the whole id on hover (as in the admin's lists)."""
    text = str(value or "")
    if len(text) <= 12:
        return text or "-"
    return format_html('<span class="ops-mono" title="{}">{}…</span>', text, text[:8])
