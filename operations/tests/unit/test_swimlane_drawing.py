"""The swimlane as drawn from timeline entries, without a database: lanes, columns, arrows, states."""

import random
import xml.etree.ElementTree as ET
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from reliable_messaging.operator import (
    DeadLetterMark,
    Handling,
    TimelineEntry,
    WaitingPlace,
    context_names,
    timeline_waiting,
)

from operations.swimlane import COLORS, GUTTER, LANE_HEIGHT, MAX_COLUMN, RADIUS, TOP, saga_swimlane, waiting_reasons

SVG = "{http://www.w3.org/2000/svg}"
STARTED = datetime(2026, 11, 24, 18, 0, tzinfo=UTC)
NOW = STARTED + timedelta(minutes=5)  # every entry here is inside the inbox's retention


def entry(message_id: str, event_type: str, source: str, *, after: float, caused_by: str = "", **more) -> TimelineEntry:
    published = TimelineEntry(
        message_id=message_id,
        event_type=event_type,
        source=source,
        causation_id=caused_by,
        occurred_at=STARTED + timedelta(seconds=after),
        published_at=STARTED + timedelta(seconds=after + 0.01),
        state="published",
    )
    return replace(published, **more)


def drawn(entries: list[TimelineEntry], waiting: list[WaitingPlace] | None = None) -> ET.Element:
    return ET.fromstring(saga_swimlane(entries, started_at=STARTED, waiting=waiting or []))


def reason(entry: TimelineEntry, *, expect_answers: bool = False) -> str:
    """What the swimlane says of ``entry``'s wait, from the places ``timeline_waiting`` finds."""
    waiting = timeline_waiting([entry], now=NOW, expect_answers=expect_answers)
    return waiting_reasons(waiting).get(entry.message_id, "")


def marks(svg: ET.Element) -> dict[str, ET.Element]:
    return {g.get("data-message-id"): g for g in svg.iter(f"{SVG}g") if "saga-event" in g.get("class", "")}


def lane_y(n: int) -> float:
    return TOP + LANE_HEIGHT * n + LANE_HEIGHT / 2


COMPENSATED = [
    entry("m1", "orders.order.created", "orders", after=0.0),
    entry("m2", "payments.payment.succeeded", "payments", after=0.2, caused_by="m1"),
    entry("m3", "inventory.stock.reservation_failed", "inventory", after=0.3, caused_by="m2"),
    entry("m4", "payments.payment.refunded", "payments", after=65, caused_by="m3"),
]


def test_one_lane_per_installed_context_and_one_column_per_event_in_order():
    svg = drawn(COMPENSATED)
    circles = {mid: g.find(f"{SVG}circle") for mid, g in marks(svg).items()}

    lanes = [t.text for t in svg.iter(f"{SVG}text") if t.get("font-weight") == "600"]
    assert lanes == context_names()
    assert [float(circles[m].get("cx")) for m in ("m1", "m2", "m3", "m4")] == [
        GUTTER + MAX_COLUMN * i + MAX_COLUMN / 2 for i in range(4)
    ]
    assert [float(circles[m].get("cy")) for m in ("m1", "m2", "m3", "m4")] == [
        lane_y(0),
        lane_y(1),
        lane_y(2),
        lane_y(1),
    ]
    assert svg.get("aria-label") == f"The saga in 4 events across {', '.join(context_names())}"


def test_an_arrow_goes_from_each_cause_to_its_effect_and_colours_follow_the_declared_kinds():
    svg = drawn(COMPENSATED)

    arrows = [p.find(f"{SVG}title").text for p in svg.iter(f"{SVG}path") if p.get("class") == "saga-cause"]
    assert arrows == [
        "orders.order.created caused payments.payment.succeeded",
        "payments.payment.succeeded caused inventory.stock.reservation_failed",
        "inventory.stock.reservation_failed caused payments.payment.refunded",
    ]
    fills = {mid: g.find(f"{SVG}circle").get("fill") for mid, g in marks(svg).items()}
    assert fills == {
        "m1": COLORS["step"],
        "m2": COLORS["step"],
        "m3": COLORS["failure"],
        "m4": COLORS["compensation"],
    }
    times = [g.findall(f"{SVG}text")[1].text for g in marks(svg).values()]
    assert times == ["+0ms", "+200ms", "+300ms", "+1m 05s"]


def test_a_waiting_event_is_hollow_and_says_why():
    pending = entry("m1", "orders.order.created", "orders", after=0, state="pending", published_at=None)
    svg = drawn([pending], timeline_waiting([pending], now=NOW))
    [mark] = marks(svg).values()

    assert mark.get("class") == "saga-event saga-step saga-waiting"
    assert mark.find(f"{SVG}circle").get("fill") == "#ffffff"
    assert mark.find(f"{SVG}title").text.splitlines()[-2:] == ["not published yet", "waiting in the outbox"]


def test_a_dead_letter_is_crossed_in_the_lane_of_the_consumer_that_failed():
    failed = entry(
        "m1",
        "orders.order.created",
        "orders",
        after=0,
        dead_letters=[DeadLetterMark(id=7, consumer="payments", reason="handler_error")],
    )
    svg = drawn([failed], timeline_waiting([failed], now=NOW))

    [cross] = [g for g in svg.iter(f"{SVG}g") if g.get("class") == "saga-dead-letter"]
    assert cross.find(f"{SVG}title").text == "dead letter #7 at payments: handler_error"
    start = cross.find(f"{SVG}path").get("d").split()[0]  # "M<x>,<y>": the cross's corner
    assert float(start.split(",")[1]) == lane_y(1) - 5


def test_waiting_reasons_in_the_order_an_operator_looks_for_them(monkeypatch):
    base = entry("m", "orders.order.created", "orders", after=0)  # its subscribers: payments, events
    by_events = Handling(consumer="events", handled_at=STARTED + timedelta(seconds=1))
    assert reason(replace(base, state="parked")) == "parked in the outbox"
    assert reason(base) == "not yet handled by payments, events"
    letter = DeadLetterMark(id=1, consumer="payments", reason="handler_error")
    assert reason(replace(base, dead_letters=[letter])) == "not yet handled by events"
    assert reason(replace(base, dead_letters=[letter], handled_by=[by_events])) == "a dead letter at payments"
    replayed = Handling(consumer="payments", handled_at=STARTED + timedelta(seconds=5))
    handled_after_replay = replace(base, dead_letters=[letter], handled_by=[by_events, replayed])
    assert reason(handled_after_replay) == ""
    monkeypatch.setattr(
        "reliable_messaging._diagnosis.local_consumers", lambda: ["orders", "inventory", "shipping", "events"]
    )
    elsewhere = replace(base, handled_by=[by_events])  # payments runs in another deployment
    assert reason(elsewhere, expect_answers=True) == "no answer yet from payments (another deployment)"
    assert reason(elsewhere, expect_answers=False) == ""


# --- Arrows never pass through an unrelated event ---------------------------------------------

OUT_OF_STOCK = [
    entry("m1", "orders.order.created", "orders", after=0.0),
    entry("m2", "payments.payment.succeeded", "payments", after=0.2, caused_by="m1"),
    entry("m3", "inventory.stock.reservation_failed", "inventory", after=0.45, caused_by="m2"),
    entry("m4", "payments.payment.refunded", "payments", after=0.7, caused_by="m3"),
    entry("m5", "orders.order.failed", "orders", after=0.72, caused_by="m3"),
]


def path_points(d: str, steps: int = 100) -> list[tuple[float, float]]:
    """The points along an SVG path of absolute M, L and C commands, as the swimlane writes them."""
    tokens = d.replace(",", " ").split()
    points, at, i = [], (0.0, 0.0), 0
    while i < len(tokens):
        command, i = tokens[i][0], i
        tokens[i] = tokens[i][1:]
        if command == "M":
            at, i = (float(tokens[i]), float(tokens[i + 1])), i + 2
            points.append(at)
        elif command == "L":
            end, i = (float(tokens[i]), float(tokens[i + 1])), i + 2
            points += [
                (at[0] + (end[0] - at[0]) * n / steps, at[1] + (end[1] - at[1]) * n / steps)
                for n in range(1, steps + 1)
            ]
            at = end
        else:
            assert command == "C", d
            c1, c2, end = ((float(tokens[i + k]), float(tokens[i + k + 1])) for k in (0, 2, 4))
            i += 6
            for n in range(1, steps + 1):
                t = n / steps
                w = ((1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t**2, t**3)
                points.append(tuple(sum(wk * p[j] for wk, p in zip(w, (at, c1, c2, end), strict=True)) for j in (0, 1)))
            at = end
    return points


def arrows_through_unrelated_events(svg: ET.Element) -> list[str]:
    """Each arrow that comes within a mark's radius (and a little) of an event it does not join."""
    centres = {
        g.find(f"{SVG}title").text.split("\n", 1)[0]: (
            float(g.find(f"{SVG}circle").get("cx")),
            float(g.find(f"{SVG}circle").get("cy")),
        )
        for g in marks(svg).values()
    }
    found = []
    for arrow in svg.iter(f"{SVG}path"):
        if arrow.get("class") != "saga-cause":
            continue
        title = arrow.find(f"{SVG}title").text
        joined = set(title.split(" caused "))
        points = path_points(arrow.get("d"))
        for event_type, (cx, cy) in centres.items():
            if event_type not in joined and min(((x - cx) ** 2 + (y - cy) ** 2) ** 0.5 for x, y in points) < RADIUS + 4:
                found.append(f"{title} runs through {event_type}")
    return found


def test_the_out_of_stock_sagas_failure_arrow_goes_round_the_refund():
    svg = drawn(OUT_OF_STOCK)

    assert arrows_through_unrelated_events(svg) == []
    arrows = {p.find(f"{SVG}title").text: p.get("d") for p in svg.iter(f"{SVG}path") if p.get("class") == "saga-cause"}
    detour = arrows.pop("inventory.stock.reservation_failed caused orders.order.failed")
    assert (detour.count("C"), detour.count("L")) == (2, 1)  # round the refund, along a lane's edge
    assert [d.count("C") for d in arrows.values()] == [1, 1, 1]  # between neighbours: an S, as before


def test_no_arrow_of_any_saga_passes_through_an_unrelated_event():
    rng = random.Random(28)
    lanes = ["orders", "payments", "inventory", "shipping"]
    for _ in range(80):
        count = rng.randint(2, 12)
        entries = []
        for n in range(count):
            lane = rng.choice(lanes)
            cause = f"e{rng.randrange(n)}" if n and rng.random() < 0.9 else ""
            entries.append(entry(f"e{n}", f"{lane}.thing.happened{n}", lane, after=n * 0.1, caused_by=cause))
        assert arrows_through_unrelated_events(drawn(entries)) == [], [(e.source, e.causation_id) for e in entries]
