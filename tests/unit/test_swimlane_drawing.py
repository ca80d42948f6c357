"""The swimlane as drawn from timeline entries, without a database: lanes, columns, arrows, states."""

import xml.etree.ElementTree as ET
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from messaging.api import DeadLetterMark, Handling, TimelineEntry, WaitingPlace, timeline_waiting
from orders.swimlane import COLORS, GUTTER, LANE_HEIGHT, MAX_COLUMN, TOP, saga_swimlane, waiting_reasons

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
    assert lanes == ["orders", "payments", "inventory", "shipping"]
    assert [float(circles[m].get("cx")) for m in ("m1", "m2", "m3", "m4")] == [
        GUTTER + MAX_COLUMN * i + MAX_COLUMN / 2 for i in range(4)
    ]
    assert [float(circles[m].get("cy")) for m in ("m1", "m2", "m3", "m4")] == [
        lane_y(0),
        lane_y(1),
        lane_y(2),
        lane_y(1),
    ]
    assert svg.get("aria-label") == "The saga in 4 events across orders, payments, inventory, shipping"


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
    monkeypatch.setattr("messaging.diagnosis.local_consumers", lambda: ["orders", "inventory", "shipping", "events"])
    elsewhere = replace(base, handled_by=[by_events])  # payments runs in another deployment
    assert reason(elsewhere, expect_answers=True) == "no answer yet from payments (another deployment)"
    assert reason(elsewhere, expect_answers=False) == ""
