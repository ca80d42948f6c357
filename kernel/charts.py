"""Inline SVG charts for the operator overview, rendered on the server.

The admin must work without JavaScript or a CDN, so each function returns one self-contained
``<svg>``: real ``<text>`` (selectable; ``currentColor`` follows the admin's light or dark theme),
a ``<title>`` tooltip on every mark, a ``<desc>`` saying in words what the picture shows (``role="img"``
hides the marks from screen readers), and ``width="100%"`` capped at the natural width. Every
string from the caller is escaped once, where the markup is built, and a colour that is not hex
falls back to grey, so no argument can inject markup or CSS. Output is deterministic and
coordinates carry at most one decimal, to keep pages small and diffs readable.
"""

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime

from django.utils.html import escape
from reliable_messaging.operator import format_duration

FONT = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica Neue, Arial, sans-serif"  # unquoted: valid CSS
GREY = "#9e9e9e"
_HEX = re.compile(r"^#(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})$")
_CHAR = 6.8  # mean width of a 12px system-font character, to lay out labels without measuring them
LEFT, RIGHT, TOP = 56, 20, 30  # room for y labels, for half the last time label, for the title
# Tick steps: 1-2-2.5-5 for counts; whole seconds, minutes and hours for durations.
COUNT_STEPS = sorted({int(m * 10**e) for e in range(10) for m in (1, 2, 2.5, 5)})
SECOND_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400]


def _num(x: float) -> str:
    """A coordinate with at most one decimal, to keep the markup small."""
    text = f"{x:.1f}".removesuffix(".0")
    return "0" if text == "-0" else text


def _fmt(value: float, unit: str = "", tick: bool = False) -> str:
    """Seconds (unit ``"s"``) as a duration, anything else as a number and its unit; a tick label drops
    the unit and, as ticks fall on whole minutes or hours, a zero last part (``5m``, ``2h``)."""
    if unit == "s":
        text = format_duration(value)
        return text.removesuffix(" 00s").removesuffix(" 00m").removesuffix(" 00h") if tick else text
    number = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
    if number == "1" and unit.endswith("s"):
        unit = unit[:-1]  # 1 row, 2 rows
    return number if tick else f"{number} {unit}".rstrip()


def _attrs(**attrs: object) -> str:
    """``text_anchor=`` becomes ``text-anchor="..."``; strings are escaped, numbers rounded."""
    return "".join(
        f' {key.replace("_", "-")}="{_num(v) if isinstance(v, int | float) else escape(v)}"' for key, v in attrs.items()
    )


def _el(tag: str, body: str = "", **attrs: object) -> str:
    """An element whose ``body`` is markup already (escape text before passing it)."""
    return f"<{tag}{_attrs(**attrs)}>{body}</{tag}>" if body else f"<{tag}{_attrs(**attrs)}/>"


def _tip(text: str) -> str:
    return f"<title>{escape(text)}</title>"


def _text(x: float, y: float, text: str, fit: float = 0, **attrs: object) -> str:
    """Text at (x, y); with ``fit``, cut to about that many pixels with an ellipsis, the whole text as tooltip."""
    room = max(int(fit / _CHAR), 2)
    if fit and len(text) > room:
        return _el("text", _tip(text) + escape(text[: room - 1] + "…"), x=x, y=y, **attrs)
    return _el("text", escape(text), x=x, y=y, **attrs)


def _color(colors: dict[str, str], name: str) -> str:
    value = colors.get(name, GREY)
    return value if isinstance(value, str) and _HEX.match(value) else GREY


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def _hhmm(moment: datetime) -> str:
    return _utc(moment).strftime("%H:%M")


def _spacing(buckets: Sequence[datetime]) -> float:
    """Seconds between buckets (a minute when it cannot be told)."""
    seconds = (buckets[1] - buckets[0]).total_seconds() if len(buckets) > 1 else 0
    return seconds if seconds > 0 else 60


def _period(buckets: Sequence[datetime]) -> str:
    if not buckets:
        return "no data"
    spacing, n = _spacing(buckets), len(buckets)
    what = f"minute{'s' * (n != 1)}" if spacing == 60 else f"intervals of {format_duration(spacing)}"
    return f"{n} {what} from {_hhmm(buckets[0])} to {_hhmm(buckets[-1])} UTC"


def _pad(values: Sequence[float], n: int) -> list[float]:
    return [*values[:n], *[0] * (n - len(values))]


def _ticks(peak: float, steps: Sequence[int], px: float) -> list[float]:
    """0 up to the lowest top >= ``peak`` in 1-4 equal steps of ``steps``, the most steps on a tie, each step
    at least 18px of the ``px`` high plot so the labels never touch; 0-1 for no data."""
    most = max(1, min(4, int(px // 18)))
    if peak <= 0:
        return [0, 1]
    candidates = [*steps, *(steps[-1] * 2**k for k in range(1, 64))]
    n, step = min(((max(1, math.ceil(peak / s)), s) for s in candidates if peak / s <= most), key=lambda c: c[0] * c[1])
    return [i * step for i in range(n + 1)]


def _y_axis(ticks: list[float], left: float, right: float, top: float, bottom: float, unit: str = "") -> str:
    """Horizontal gridlines with their labels on the left, the zero line darker."""
    out = []
    for tick in ticks:
        y, opacity = bottom - tick / ticks[-1] * (bottom - top), 0.4 if tick == 0 else 0.1
        out.append(_el("line", x1=left, x2=right, y1=y, y2=y, stroke="currentColor", stroke_opacity=opacity))
        out.append(_text(left - 6, y + 4, _fmt(tick, unit, tick=True), text_anchor="end", font_size=11))
    return "".join(out)


def _x_labels(buckets: Sequence[datetime], left: float, step: float, y: float) -> str:
    """HH:MM under a few buckets at round times (every 10 minutes for an hour of minutes), ~70px apart at least;
    "UTC" under the y labels says which clock."""
    n, spacing = len(buckets), _spacing(buckets)
    room = max(1, int(n * step // 70))
    every = next((k for k in (1, 2, 5, 10, 15, 20, 30, 60, 120, 240) if n / k <= room), math.ceil(n / room))
    out = [_text(4, y, "UTC", font_size=11, fill_opacity=0.7)] if buckets else []
    shown = set()  # a last point at "now" shares its minute with the one before: one label for both
    for i, moment in enumerate(buckets):
        if int(_utc(moment).timestamp() // spacing) % every == 0 and _hhmm(moment) not in shown:
            shown.add(_hhmm(moment))
            x = left + (i + 0.5) * step
            out.append(_el("line", x1=x, x2=x, y1=y - 16, y2=y - 12, stroke="currentColor", stroke_opacity=0.4))
            out.append(_text(x, y, _hhmm(moment), text_anchor="middle", font_size=11))
    return "".join(out)


def _legend(items: list[tuple[str, str]], left: float, right: float) -> tuple[str, int]:
    """A swatch and a text per item, wrapping onto more lines; returns the markup (from y=0) and its height."""
    out, x, line = [], left, 0
    for text, color in items:
        w = 14 + len(text) * _CHAR + 18
        if x > left and x + w > right:
            x, line = left, line + 1
        out.append(_el("rect", x=x, y=line * 18 + 3, width=10, height=10, rx=2, fill=color))
        out.append(_text(x + 14, line * 18 + 12, text))
        x += w
    return "".join(out), (line + 1) * 18 if items else 0


def _svg(width: float, height: float, title: str, desc: str, body: str) -> str:
    head = _attrs(
        xmlns="http://www.w3.org/2000/svg", viewBox=f"0 0 {_num(width)} {_num(height)}", width="100%",
        style=f"max-width:{_num(width)}px;height:auto", role="img", aria_label=title,
        font_family=FONT, font_size=12, fill="currentColor",
    )  # fmt: skip
    heading = _text(4, 16, title, fit=width - 8, font_size=13, font_weight="bold")
    return f"<svg{head}>{_tip(title)}<desc>{escape(desc)}</desc>{heading}{body}</svg>"


def stacked_bars(
    *,
    buckets: list[datetime],
    series: dict[str, list[int]],
    colors: dict[str, str],
    title: str,
    width: int = 720,
    height: int = 220,
) -> str:
    """One bar per bucket, stacked by series in the order of ``series`` (sagas per minute by outcome, say).

    Stacked rather than side by side: 60 buckets leave no room for groups, and the stack shows the
    volume and its make-up at once. The first series sits on the axis, where it reads most exactly.
    """
    n, names = len(buckets), list(series)
    cells = {name: _pad(series[name], n) for name in names}
    sums = {name: sum(cells[name]) for name in names}
    legend, legend_h = _legend([(f"{name} {sums[name]:,}", _color(colors, name)) for name in names], LEFT, width)
    left, right, top, bottom = LEFT, width - RIGHT, TOP, height - 26 - legend_h
    ticks = _ticks(max((sum(cells[name][i] for name in names) for i in range(n)), default=0), COUNT_STEPS, bottom - top)
    scale, step = (bottom - top) / ticks[-1], (right - left) / max(n, 1)
    parts = [_y_axis(ticks, left, right, top, bottom)]
    for i, moment in enumerate(buckets):
        y = bottom
        for name in (name for name in names if cells[name][i] > 0):
            h = max(cells[name][i] * scale, 1)  # a single order stays visible on a tall axis
            y -= h
            tip, color = _tip(f"{_hhmm(moment)} UTC: {cells[name][i]:,} {name}"), _color(colors, name)
            parts.append(_el("rect", tip, x=left + (i + 0.1) * step, y=y, width=step * 0.8, height=h, fill=color))
    parts.append(_x_labels(buckets, left, step, bottom + 16))
    parts.append(f'<g transform="translate(0 {_num(bottom + 24)})">{legend}</g>')
    total = sum(sums.values())
    desc = f"{title}: {_period(buckets)}, {total:,} in total: " + ", ".join(f"{sums[k]:,} {k}" for k in names) + "."
    return _svg(width, height, title, desc, "".join(parts))


def line_chart(
    *,
    buckets: list[datetime],
    series: dict[str, list[float]],
    colors: dict[str, str],
    title: str,
    units: dict[str, str] | None = None,
    width: int = 720,
    height: int = 220,
) -> str:
    """One small panel per series, stacked over a shared time axis (outbox backlog in rows, oldest row's age).

    Panels, not a left and a right axis: with two axes the lines' crossings look meaningful and are
    not, and which line belongs to which scale hangs on colour alone. Each panel has its own scale
    from zero, ticks in its unit (durations on whole minutes or hours), and a heading with its name,
    latest value and peak; the time positions line up across panels. Unit ``"s"`` reads as a duration.
    """
    units, n, names = units or {}, len(buckets), list(series)
    left, right, gap = LEFT, width - RIGHT, 12
    step = (right - left) / max(n, 1)
    radius = min(max(step / 4, 1.2), 2.5)  # dots that stay apart when 60 points share a narrow chart
    panel = (height - TOP + 6 - 22 - gap * (len(names) - 1)) / max(len(names), 1)  # a heading and a plot
    parts, summaries, y0 = [], [], TOP - 6
    for name in names:
        values, unit, color = _pad(series[name], n), units.get(name, ""), _color(colors, name)
        top, bottom = y0 + 22, y0 + panel
        ticks = _ticks(max(values, default=0), SECOND_STEPS if unit == "s" else COUNT_STEPS, bottom - top)
        parts.append(_y_axis(ticks, left, right, top, bottom, unit))
        summary = f"now {_fmt(values[-1], unit)}, peak {_fmt(max(values), unit)}" if values else "no data"
        summaries.append(f"{name} {summary}")
        heading = _el("tspan", escape(name), fill=color, font_weight="bold") + _el("tspan", escape(summary), dx=8)
        parts.append(_el("text", heading, x=left, y=y0 + 14))
        points = [(left + (i + 0.5) * step, bottom - v / ticks[-1] * (bottom - top)) for i, v in enumerate(values)]
        if points:
            line = " ".join(f"{_num(x)},{_num(y)}" for x, y in points)
            area = f"{_num(points[0][0])},{_num(bottom)} {line} {_num(points[-1][0])},{_num(bottom)}"
            parts.append(_el("polygon", points=area, fill=color, fill_opacity=0.12))
            stroke = {"stroke": color, "stroke_width": 2, "stroke_linejoin": "round"}
            parts.append(_el("polyline", points=line, fill="none", **stroke))
        for (x, y), moment, v in zip(points, buckets, values, strict=True):
            parts.append(_el("circle", _tip(f"{_hhmm(moment)} UTC: {_fmt(v, unit)}"), cx=x, cy=y, r=radius, fill=color))
        y0 = bottom + gap
    parts.append(_x_labels(buckets, left, step, y0 - gap + 16))
    desc = f"{title}: {_period(buckets)}; " + "; ".join(summaries) + "."
    return _svg(width, height, title, desc, "".join(parts))


def horizontal_bars(
    *,
    rows: list[tuple[str, dict[str, int]]],
    colors: dict[str, str],
    title: str,
    width: int = 720,
) -> str:
    """One stacked bar per row, its label on the left and its counts after it (dead letters by consumer).

    Horizontal, because consumer names are long and read best left-aligned; the rows, not the data,
    set the height. One scale for every row, the biggest total spanning what labels and counts leave;
    segments stack in the order their names first appear in ``rows``.
    """
    names = list(dict.fromkeys(name for _, cells in rows for name in cells))
    notes = [", ".join(f"{v:,} {k}" for k, v in cells.items() if v) or "0" for _, cells in rows]
    # _CHAR is a mean: leave a character's room more, or the longest label would be cut.
    label_w = min(max((len(label) for label, _ in rows), default=0) * _CHAR + 24, width * 0.4)
    note_w = min(max((len(note) for note in notes), default=0) * _CHAR + 20, width * 0.35)
    left, right, row_h = label_w, width - note_w, 26
    scale = (right - left) / max(max((sum(cells.values()) for _, cells in rows), default=0), 1)
    parts = [] if rows else [_text(4, TOP + 14, "Nothing to show.")]
    for r, ((label, cells), note) in enumerate(zip(rows, notes, strict=True)):
        y, x = TOP + r * row_h, left
        parts.append(_text(left - 8, y + 15, label, fit=label_w - 16, text_anchor="end"))
        for name in (name for name in names if cells.get(name, 0) > 0):
            w = max(cells[name] * scale, 1)
            tip = _tip(f"{label}: {cells[name]:,} {name}")
            parts.append(_el("rect", tip, x=x, y=y + 4, width=w, height=16, fill=_color(colors, name)))
            x += w
        parts.append(_text(x + 6, y + 16, note, fit=note_w - 12, font_size=11))
    legend_y = TOP + max(len(rows), 1) * row_h + 6
    totals = {name: sum(cells.get(name, 0) for _, cells in rows) for name in names}
    legend, legend_h = _legend([(f"{k} {v:,}", _color(colors, k)) for k, v in totals.items()], left, width)
    parts.append(f'<g transform="translate(0 {_num(legend_y)})">{legend}</g>')
    lines = "; ".join(f"{label}: {note}" for (label, _), note in zip(rows, notes, strict=True))
    desc = f"{title}: {len(rows)} row{'s' * (len(rows) != 1)}, {sum(totals.values()):,} in total"
    desc += f": {lines}." if rows else "."
    return _svg(width, legend_y + legend_h + 6, title, desc, "".join(parts))
