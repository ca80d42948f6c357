"""An order's saga as a picture: one lane per context, events left to right, cause to effect.

Rendered on the server as inline SVG: no JavaScript, text stays selectable, every mark has a
``<title>`` (its type, message id and time). Events take one column each in order of
occurrence: a saga's first hops are milliseconds apart and a cancellation may come hours later,
so a linear time axis would pile the interesting part into one spot; each column says its time
since checkout instead. It draws the detailed timeline (``timeline_for(..., detailed=True)``) and
the places ``timeline_waiting`` found in it, so a split deployment draws what it knows.
"""

from datetime import datetime
from html import escape

from reliable_messaging.operator import TimelineEntry, WaitingPlace, event_kind, installed_contexts

from kernel.charts import format_duration

LANE_HEIGHT = 86
GUTTER = 96  # lane names
TOP = 8
MIN_COLUMN, MAX_COLUMN = 96, 150
WIDEST = 1100  # wider sagas get narrower columns
SHRINK = 0.75  # the picture scales down to fit its box, to this much; below, the box scrolls (a phone)
RADIUS = 9
MIN_WIDTH = 780  # the legend's

COLORS = {
    "step": "#1565c0",
    "outcome": "#2e7d32",
    "failure": "#c62828",
    "compensation": "#ef6c00",
}
LEGEND = [
    ("step", "saga step"),
    ("outcome", "confirmed"),
    ("failure", "failure"),
    ("compensation", "cancellation or compensation"),
]


def kind_of(event_type: str) -> str:
    """Its colour, as its producer's declaration says (``publishes`` in its context.toml); a step
    for an event no installed context publishes."""
    return event_kind(event_type) or "step"


# A mark gives one reason to wait: of its places' kinds, the first here, in the order an operator
# would look (the outbox, this deployment's consumers and dead letters, then another deployment).
REASONS = {
    "pending": "waiting in the outbox",
    "parked": "parked in the outbox",
    "unhandled": "not yet handled by {}",
    "dead_letter": "a dead letter at {}",
    "elsewhere": "no answer yet from {} (another deployment)",
}


def waiting_reasons(waiting: list[WaitingPlace]) -> dict[str, str]:
    """Why each event with a place in ``waiting`` is drawn as waiting, by message id."""
    consumers: dict[str, dict[str, list[str]]] = {}
    for place in waiting:
        consumers.setdefault(place.message_id, {}).setdefault(place.kind, []).append(place.consumer or "")
    reasons = {}
    for message_id, by_kind in consumers.items():
        kind = min(by_kind, key=list(REASONS).index)
        reasons[message_id] = REASONS[kind].format(", ".join(by_kind[kind]))
    return reasons


def saga_swimlane(entries: list[TimelineEntry], *, started_at: datetime, waiting: list[WaitingPlace]) -> str:
    """The SVG markup for ``entries`` (oldest first); ``started_at`` is the checkout and ``waiting``
    what ``timeline_waiting`` found in ``entries`` (its ``expect_answers`` decides the elsewhere marks)."""
    reasons = waiting_reasons(waiting)
    contexts = [d.name for d in installed_contexts()]
    lanes = contexts + sorted({e.source for e in entries} - set(contexts))
    column = max(MIN_COLUMN, min(MAX_COLUMN, (WIDEST - GUTTER) // max(1, len(entries))))
    width = max(GUTTER + column * max(1, len(entries)) + 16, MIN_WIDTH)
    legend_y = TOP + LANE_HEIGHT * len(lanes) + 22
    height = legend_y + 34

    def at(index: int, lane: str) -> tuple[float, float]:
        return GUTTER + column * index + column / 2, TOP + LANE_HEIGHT * lanes.index(lane) + LANE_HEIGHT / 2

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="saga-swimlane" role="img" viewBox="0 0 {width} {height}" '
        f'width="100%" style="max-width: {width}px; min-width: {width * SHRINK:.0f}px" '
        f'font-family="system-ui, -apple-system, Segoe UI, sans-serif" '
        f'aria-label="The saga in {len(entries)} events across {", ".join(lanes)}">',
        f"<title>The saga: {len(entries)} events, one lane per context</title>",
        '<defs><marker id="saga-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#607d8b"/></marker></defs>',
    ]
    for n, lane in enumerate(lanes):
        y = TOP + LANE_HEIGHT * n
        shade = "#f5f7fa" if n % 2 == 0 else "#ffffff"
        parts.append(f'<rect x="0" y="{y}" width="{width}" height="{LANE_HEIGHT}" fill="{shade}"/>')
        parts.append(
            f'<text x="10" y="{y + LANE_HEIGHT / 2 + 4:.0f}" font-size="13" font-weight="600" fill="#37474f">'
            f"{escape(lane)}</text>"
        )
    parts += _arrows(entries, at, column)
    for index, entry in enumerate(entries):
        parts += _mark(entry, index, at, lanes, started_at, reasons.get(entry.message_id, ""))
    parts += _legend(legend_y)
    parts.append("</svg>")
    return "\n".join(parts)


Point = tuple[float, float]
CLEARANCE = RADIUS + 6  # how far an arrow keeps from the centre of an event it does not join


def _arrows(entries: list[TimelineEntry], at, column: float) -> list[str]:
    position = {e.message_id: (i, e) for i, e in enumerate(entries)}
    drawn = []
    for index, entry in enumerate(entries):
        cause = position.get(entry.causation_id or "")
        if cause is None:
            continue
        # Each column holds one event: those between cause and effect are the ones to keep clear of.
        between = [at(k, entries[k].source) for k in range(cause[0] + 1, index)]
        path = _arrow_path(at(cause[0], cause[1].source), at(index, entry.source), between, column)
        drawn.append(
            f'<path class="saga-cause" d="{path}" fill="none" stroke="#607d8b" stroke-width="1.4" '
            f'marker-end="url(#saga-arrow)"><title>{escape(cause[1].event_type)} caused '
            f"{escape(entry.event_type)}</title></path>"
        )
    return drawn


def _arrow_path(cause: Point, effect: Point, between: list[Point], column: float) -> str:
    """From the cause's right to the effect's left: an S, which never crosses the labels above and
    below the marks; if that S would run through an event between them, a detour along a lane's
    edge instead (no event sits there), bending only in the half-columns next to its two ends."""
    (x1, y1), (x2, y2) = cause, effect
    start, end = x1 + RADIUS, x2 - RADIUS - 2
    bend = (end - start) / 2
    s_curve = ((start, y1), (start + bend, y1), (end - bend, y2), (end, y2))
    if not any(_distance(mark, _bezier(*s_curve)) < CLEARANCE for mark in between):
        return f"M{_xy(s_curve[0])} C{_xy(s_curve[1])} {_xy(s_curve[2])} {_xy(s_curve[3])}"
    edge = _edge_between(y1, y2)
    out, back = x1 + column / 2, x2 - column / 2  # half-way to the next column, and from the last one
    first, last = (start + out) / 2, (back + end) / 2
    return (
        f"M{_xy((start, y1))} C{_xy((first, y1))} {_xy((first, edge))} {_xy((out, edge))} "
        f"L{_xy((back, edge))} C{_xy((last, edge))} {_xy((last, y2))} {_xy((end, y2))}"
    )


def _edge_between(y1: float, y2: float) -> float:
    """The lane edge to run along: between two lanes, the one next to the effect's lane; within
    one lane, its bottom edge."""
    lane1, lane2 = (int((y - TOP) // LANE_HEIGHT) for y in (y1, y2))
    if lane1 == lane2:
        return TOP + LANE_HEIGHT * (lane1 + 1)
    return TOP + LANE_HEIGHT * (lane2 + 1 if lane2 < lane1 else lane2)


def _bezier(p0: Point, p1: Point, p2: Point, p3: Point, steps: int = 256) -> list[Point]:
    points = []
    for n in range(steps + 1):
        t = n / steps
        a, b, c, d = (1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t**2, t**3
        points.append((a * p0[0] + b * p1[0] + c * p2[0] + d * p3[0], a * p0[1] + b * p1[1] + c * p2[1] + d * p3[1]))
    return points


def _distance(mark: Point, points: list[Point]) -> float:
    return min(((x - mark[0]) ** 2 + (y - mark[1]) ** 2) ** 0.5 for x, y in points)


def _xy(point: Point) -> str:
    return f"{point[0]:.1f},{point[1]:.1f}"


def _mark(entry: TimelineEntry, index: int, at, lanes: list[str], started_at: datetime, waiting: str) -> list[str]:
    """The event's mark; ``waiting`` is why it waits, or "" when nothing waits on it."""
    x, y = at(index, entry.source)
    kind = kind_of(entry.event_type)
    color = COLORS[kind]
    offset = (entry.occurred_at - started_at).total_seconds()
    details = [
        entry.event_type,
        f"message id {entry.message_id}",
        f"occurred {entry.occurred_at.isoformat()} (+{offset:.3f}s)",
        f"published {entry.published_at.isoformat()}" if entry.published_at else "not published yet",
    ]
    details += [f"handled by {h.consumer}" for h in entry.handled_by]
    if waiting:
        details.append(waiting)
    style = (
        f'fill="#ffffff" stroke="{color}" stroke-width="2.5" stroke-dasharray="4 3"'
        if waiting
        else f'fill="{color}" stroke="#ffffff" stroke-width="1.5"'
    )
    state = "waiting" if waiting else "done"
    label_y = y + RADIUS + 15 if index % 2 == 0 else y - RADIUS - 20  # alternate: neighbours never collide
    short = entry.event_type.split(".", 1)[-1]
    title = escape("\n".join(details))
    parts = [
        f'<g class="saga-event saga-{kind} saga-{state}" data-message-id="{escape(entry.message_id)}">',
        f"<title>{title}</title>",
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{RADIUS}" {style}/>',
        f'<text x="{x:.1f}" y="{label_y:.1f}" font-size="11" text-anchor="middle" fill="#263238">'
        f"{escape(short)}</text>",
        f'<text x="{x:.1f}" y="{label_y + 12:.1f}" font-size="10" text-anchor="middle" fill="#78909c">'
        f"+{_duration(offset)}{' · waiting' if waiting else ''}</text>",
        "</g>",
    ]
    for n, letter in enumerate(entry.dead_letters):
        # In the lane of the consumer that failed; the event log is no lane: beside the event.
        lane = letter.consumer if letter.consumer in lanes else entry.source
        lx, ly = at(index, lane)
        lx += RADIUS + 8 + 12 * n
        note = f"dead letter #{letter.id} at {letter.consumer}: {letter.reason}"
        parts.append(
            f'<g class="saga-dead-letter"><title>{escape(note)}</title>'
            f'<path d="M{lx - 5:.1f},{ly - 5:.1f} L{lx + 5:.1f},{ly + 5:.1f} M{lx - 5:.1f},{ly + 5:.1f} '
            f'L{lx + 5:.1f},{ly - 5:.1f}" stroke="#c62828" stroke-width="3"/></g>'
        )
    return parts


def _legend(y: float) -> list[str]:
    parts, x = [], 10
    for kind, label in LEGEND:
        parts.append(f'<circle cx="{x + 6}" cy="{y}" r="6" fill="{COLORS[kind]}"/>')
        parts.append(f'<text x="{x + 16}" y="{y + 4}" font-size="11" fill="#455a64">{escape(label)}</text>')
        x += 28 + 6.5 * len(label)
    parts.append(
        f'<circle cx="{x + 6}" cy="{y}" r="6" fill="#ffffff" stroke="#1565c0" stroke-width="2" stroke-dasharray="3 2"/>'
    )
    parts.append(f'<text x="{x + 16}" y="{y + 4}" font-size="11" fill="#455a64">waiting</text>')
    x += 80
    parts.append(
        f'<path d="M{x + 1},{y - 5} L{x + 11},{y + 5} M{x + 1},{y + 5} L{x + 11},{y - 5}" stroke="#c62828" '
        'stroke-width="3"/>'
    )
    parts.append(f'<text x="{x + 18}" y="{y + 4}" font-size="11" fill="#455a64">dead letter</text>')
    parts.append(
        f'<text x="10" y="{y + 24}" font-size="10" fill="#78909c">One column per event in order of occurrence; '
        "+time since checkout; arrows go from cause to effect. Hover a mark for its message id.</text>"
    )
    return parts


def _duration(seconds: float) -> str:
    """Time since checkout: a saga's first minute to the millisecond, then as an age."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    return format_duration(seconds)
