"""kernel.charts: the operator overview's inline SVG, checked as parsed XML (no database, no broker)."""

import itertools
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from kernel.charts import format_duration, horizontal_bars, line_chart, stacked_bars

SVG = "{http://www.w3.org/2000/svg}"
START = datetime(2025, 3, 1, 11, 34, tzinfo=UTC)
HOUR = [START + timedelta(minutes=i) for i in range(60)]
COLORS = {"CONFIRMED": "#2e7d32", "FAILED": "#c62828", "CANCELLED": "#757575", "PENDING": "#f9a825"}
OUTCOMES = {
    "CONFIRMED": [(i * 7) % 23 for i in range(60)],
    "FAILED": [3 if i % 10 == 0 else 0 for i in range(60)],
    "CANCELLED": [1 if i % 15 == 0 else 0 for i in range(60)],
    "PENDING": [0] * 57 + [2, 4, 1200],
}
OUTBOX = {"backlog": [float(i * 10) for i in range(60)], "oldest pending": [float(i * 130) for i in range(60)]}
OUTBOX_COLORS = {"backlog": "#1565c0", "oldest pending": "#ef6c00"}
UNITS = {"backlog": "rows", "oldest pending": "s"}
DEAD = [
    ("orders.on_stock_reserved", {"waiting": 12, "replayed": 3}),
    ("payments.on_order_created", {"waiting": 0, "replayed": 40}),
    ("inventory.on_payment_succeeded", {"waiting": 1, "replayed": 0}),
    ("events", {"waiting": 0, "replayed": 0}),
]
DEAD_COLORS = {"waiting": "#c62828", "replayed": "#90a4ae"}


def bars(**kwargs) -> str:
    return stacked_bars(**{"buckets": HOUR, "series": OUTCOMES, "colors": COLORS, "title": "Orders", **kwargs})


def lines(**kwargs) -> str:
    args = {"buckets": HOUR, "series": OUTBOX, "colors": OUTBOX_COLORS, "units": UNITS, "title": "Outbox"}
    return line_chart(**{**args, **kwargs})


def hbars(**kwargs) -> str:
    return horizontal_bars(**{"rows": DEAD, "colors": DEAD_COLORS, "title": "Dead letters", **kwargs})


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # raises on anything that is not well-formed XML
    assert root.tag == f"{SVG}svg"
    return root


def tip(element: ET.Element) -> str:
    return element.find(f"{SVG}title").text


def marks(root: ET.Element, tag: str = "rect") -> list[ET.Element]:
    """The data marks: the elements of ``tag`` with a tooltip (legend swatches have none)."""
    return [e for e in root.iter(f"{SVG}{tag}") if e.find(f"{SVG}title") is not None]


def texts(root: ET.Element, **attrs: str) -> list[str]:
    """The visible text of each <text> with these attributes (a truncated one's tooltip left out)."""
    found = [t for t in root.iter(f"{SVG}text") if all(t.get(k.replace("_", "-")) == v for k, v in attrs.items())]
    return [
        (t.text or "") + "".join(("".join(c.itertext()) if c.tag != f"{SVG}title" else "") + (c.tail or "") for c in t)
        for t in found
    ]


def y_labels(root: ET.Element) -> list[str]:
    return texts(root, text_anchor="end", font_size="11")


CHARTS = {
    "stacked_bars": (bars, "Orders", 720),
    "stacked_bars_zero": (lambda: bars(series={k: [0] * 60 for k in OUTCOMES}), "Orders", 720),
    "stacked_bars_empty": (lambda: bars(buckets=[], series={"CONFIRMED": []}), "Orders", 720),
    "line_chart": (lines, "Outbox", 720),
    "line_chart_zero": (lambda: lines(series={k: [0.0] * 60 for k in OUTBOX}, width=480), "Outbox", 480),
    "line_chart_empty": (lambda: lines(buckets=[], series={"backlog": []}), "Outbox", 720),
    "horizontal_bars": (hbars, "Dead letters", 720),
    "horizontal_bars_empty": (lambda: hbars(rows=[]), "Dead letters", 720),
}


@pytest.mark.parametrize("name", CHARTS)
def test_every_chart_is_one_accessible_svg_that_scales_down(name):
    render, title, width = CHARTS[name]
    svg = render()
    root = parse(svg)
    assert root.get("role") == "img"
    assert root.get("aria-label") == title
    assert root[0].tag == f"{SVG}title" and root[0].text == title
    assert root[1].tag == f"{SVG}desc" and root[1].text.startswith(f"{title}: ")
    assert root.get("width") == "100%"
    assert root.get("style") == f"max-width:{width}px;height:auto"
    assert re.fullmatch(rf"0 0 {width} \d+(\.\d)?", root.get("viewBox"))
    assert "system-ui" in root.get("font-family")
    assert {e.get("font-size") for e in root.iter() if e.get("font-size")} <= {"11", "12", "13"}
    assert svg == render()  # deterministic
    numbers = [v for e in root.iter() for k, v in e.attrib.items() if k not in ("style", "font-family")]
    assert not [v for v in numbers if re.search(r"\d\.\d\d", v)]  # at most one decimal


def test_one_segment_per_non_zero_cell_each_with_its_exact_count():
    segments = marks(parse(bars()))
    expected = [
        f"{HOUR[i]:%H:%M} UTC: {values[i]:,} {name}"
        for i in range(60)
        for name, values in OUTCOMES.items()
        if values[i]
    ]
    assert [tip(s) for s in segments] == expected
    assert all(float(s.get("height")) > 0 for s in segments)
    assert "12:33 UTC: 1,200 PENDING" in expected  # thousands separated


def test_a_bigger_count_is_a_taller_bar_on_a_shared_scale():
    values = [1, 2, 5, 10, 20]
    segments = marks(parse(bars(buckets=HOUR[:5], series={"CONFIRMED": values})))
    heights = [float(s.get("height")) for s in segments]
    assert heights == sorted(heights) and len(set(heights)) == 5
    assert heights[4] == pytest.approx(2 * heights[3], abs=0.2)
    bottoms = [float(s.get("y")) + float(s.get("height")) for s in segments]
    assert max(bottoms) - min(bottoms) <= 0.1  # every bar stands on the axis


@pytest.mark.parametrize("order", [["CONFIRMED", "FAILED", "CANCELLED"], ["CANCELLED", "CONFIRMED", "FAILED"]])
def test_segments_stack_in_the_order_of_series_the_first_on_the_axis(order):
    series = {name: [4] for name in order}
    segments = marks(parse(bars(buckets=HOUR[:1], series=series)))
    assert [tip(s).split()[-1] for s in segments] == order
    assert [s.get("fill") for s in segments] == [COLORS[name] for name in order]
    ys = [float(s.get("y")) for s in segments]
    assert ys == sorted(ys, reverse=True)  # each segment above the one before
    for lower, upper in zip(segments, segments[1:], strict=False):
        assert float(upper.get("y")) + float(upper.get("height")) == pytest.approx(float(lower.get("y")), abs=0.1)


def test_the_legend_names_each_series_with_its_colour_and_total_and_the_desc_sums_up():
    root = parse(bars())
    totals = {name: sum(values) for name, values in OUTCOMES.items()}
    legend = [f"{name} {total:,}" for name, total in totals.items()]
    assert [t for t in texts(root) if t in legend] == legend
    swatches = [r.get("fill") for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is None]
    assert swatches == list(COLORS.values())
    total = sum(totals.values())
    assert root[1].text == (
        f"Orders: 60 minutes from 11:34 to 12:33 UTC, {total:,} in total: "
        + ", ".join(f"{t:,} {name}" for name, t in totals.items())
        + "."
    )


@pytest.mark.parametrize(
    ("peak", "labels"),
    [
        (1, ["0", "1"]),
        (3, ["0", "1", "2", "3"]),
        (7, ["0", "2", "4", "6", "8"]),
        (10, ["0", "5", "10"]),
        (43, ["0", "25", "50"]),
        (100, ["0", "25", "50", "75", "100"]),
        (1234, ["0", "500", "1,000", "1,500"]),
    ],
)
def test_the_y_axis_tops_at_a_round_integer_in_two_to_four_steps(peak, labels):
    root = parse(bars(buckets=HOUR[:2], series={"CONFIRMED": [peak // 2, peak]}))
    assert y_labels(root) == labels


def test_time_labels_fall_on_round_minutes_in_utc():
    root = parse(bars())
    assert texts(root, text_anchor="middle") == ["11:40", "11:50", "12:00", "12:10", "12:20", "12:30"]
    assert texts(root, x="4", font_size="11") == ["UTC"]
    naive = [b.replace(tzinfo=None) for b in HOUR]
    assert bars(buckets=naive) == bars()  # naive datetimes are taken as UTC
    paris = [b.astimezone(ZoneInfo("Europe/Paris")) for b in HOUR]
    assert bars(buckets=paris) == bars()


def test_a_last_point_at_now_in_a_round_minute_is_labelled_once():
    # The outbox history's last point is "now", in the same minute as the point before it.
    end = datetime(2025, 3, 1, 20, 40, tzinfo=UTC)
    buckets = [end - timedelta(minutes=58 - i) for i in range(59)] + [end + timedelta(seconds=30)]
    svg = line_chart(buckets=buckets, series={"backlog": [1] * 60}, colors={}, title="t")
    assert re.findall(r">(\d\d:\d\d)</text>", svg) == ["19:50", "20:00", "20:10", "20:20", "20:30", "20:40"]


def test_all_zero_data_draws_an_empty_axis_from_0_to_1():
    root = parse(bars(series={name: [0] * 60 for name in OUTCOMES}))
    assert marks(root) == []
    assert y_labels(root) == ["0", "1"]
    assert "0 in total" in root[1].text
    assert parse(bars(buckets=[], series={"CONFIRMED": []}))[1].text == "Orders: no data, 0 in total: 0 CONFIRMED."


def test_hostile_strings_are_escaped_and_hostile_colours_replaced():
    evil = '<script>alert("x")</script>&'
    svg_texts = [
        bars(title=evil, series={evil: [1] * 60}, colors={evil: '#fff" onload="alert(1)'}),
        lines(title=evil, series={evil: [1.0] * 60}, units={evil: evil}, colors={evil: "url(javascript:x)"}),
        hbars(title=evil, rows=[(evil, {evil: 2})], colors={evil: "red;background:url(x)"}),
    ]
    for svg in svg_texts:
        assert "<script" not in svg and "onload" not in svg and "javascript" not in svg
        root = parse(svg)
        assert root.get("aria-label") == evil and root[0].text == evil
        assert all(
            e.get("fill") in (None, "none", "currentColor") or e.get("fill").startswith("#") for e in root.iter()
        )
        assert "#9e9e9e" in svg  # the fallback grey
        assert any(evil in "".join(e.itertext()) for e in root.iter(f"{SVG}text"))  # shown, as text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (42, "42s"), (59.4, "59s"), (59.6, "1m 00s"), (185, "3m 05s"), (3599, "59m 59s"), (3600, "1h 00m")]
    + [(7620, "2h 07m"), (7659, "2h 07m"), (93600, "1d 02h"), (-5, "0s")],
)
def test_format_duration_reads_like_an_age(seconds, text):
    assert format_duration(seconds) == text


def test_line_chart_points_carry_time_value_and_unit():
    root = parse(lines())
    points = marks(root, "circle")
    assert len(points) == 120
    titles = [tip(p) for p in points]
    assert titles[0] == "11:34 UTC: 0 rows" and titles[59] == "12:33 UTC: 590 rows"
    assert titles[60] == "11:34 UTC: 0s" and titles[61] == "11:35 UTC: 2m 10s" and titles[119] == "12:33 UTC: 2h 07m"
    assert [p.get("fill") for p in points] == ["#1565c0"] * 60 + ["#ef6c00"] * 60
    ys = [float(p.get("cy")) for p in points[:60]]
    assert ys == sorted(ys, reverse=True)  # a rising backlog goes up


def test_line_chart_has_one_panel_per_series_with_its_own_scale_and_heading():
    root = parse(lines())
    headings = [[s.text for s in t.iter(f"{SVG}tspan")] for t in root.iter(f"{SVG}text") if len(t)]
    assert headings == [
        ["backlog", "now 590 rows, peak 590 rows"],
        ["oldest pending", "now 2h 07m, peak 2h 07m"],
    ]
    assert y_labels(root) == ["0", "200", "400", "600", "0s", "1h", "2h", "3h"]
    assert len(root.findall(f"{SVG}polyline")) == 2
    assert root[1].text == (
        "Outbox: 60 minutes from 11:34 to 12:33 UTC; backlog now 590 rows, peak 590 rows; "
        "oldest pending now 2h 07m, peak 2h 07m."
    )


def test_duration_ticks_fall_on_whole_minutes_and_a_short_panel_gets_fewer():
    ages = [0.0] * 57 + [5.0, 65.0, 185.0]
    root = parse(lines(series={"oldest pending": ages}))  # one panel: 150px high, 4 steps fit
    assert y_labels(root) == ["0s", "1m", "2m", "3m", "4m"]
    root = parse(lines(series={"backlog": [0.0] * 60, "oldest pending": ages}))  # two panels of 59px: 3 at most
    assert y_labels(root)[2:] == ["0s", "2m", "4m"]


def test_line_chart_with_zeros_or_no_data_still_draws_its_axes():
    root = parse(lines(series={k: [0.0] * 60 for k in OUTBOX}))
    assert y_labels(root) == ["0", "1", "0s", "1s"]
    assert all(tip(p).endswith((" 0 rows", " 0s")) for p in marks(root, "circle"))
    empty = parse(lines(buckets=[], series={"backlog": []}))
    assert marks(empty, "circle") == [] and "no data" in empty[1].text


def test_horizontal_bars_one_row_per_consumer_with_its_counts():
    root = parse(hbars())
    assert texts(root, text_anchor="end") == [label for label, _ in DEAD]
    notes = texts(root, font_size="11")
    assert notes == ["12 waiting, 3 replayed", "40 replayed", "1 waiting", "0"]
    segments = marks(root)
    assert [tip(s) for s in segments] == [
        "orders.on_stock_reserved: 12 waiting",
        "orders.on_stock_reserved: 3 replayed",
        "payments.on_order_created: 40 replayed",
        "inventory.on_payment_succeeded: 1 waiting",
    ]
    widths = [float(s.get("width")) for s in segments]
    assert widths[2] > widths[0] > widths[1] >= widths[3] > 0
    assert float(segments[1].get("x")) == pytest.approx(float(segments[0].get("x")) + widths[0], abs=0.1)
    assert [t for t in texts(root) if t in ("waiting 13", "replayed 43")] == ["waiting 13", "replayed 43"]


def test_horizontal_bars_grow_with_the_rows_and_cut_long_labels_keeping_them_as_tooltips():
    def height(rows) -> float:
        return float(parse(hbars(rows=rows)).get("viewBox").split()[3])

    assert height(DEAD[:1]) < height(DEAD[:2]) < height(DEAD)
    long = "inventory.on_payment_succeeded_" + "x" * 200
    root = parse(hbars(rows=[(long, {"waiting": 1})]))
    label = next(t for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "end")
    assert tip(label) == long and label[0].tail.endswith("…") and len(label[0].tail) < 60


def test_horizontal_bars_with_no_rows_say_so():
    root = parse(hbars(rows=[]))
    assert texts(root) == ["Dead letters", "Nothing to show."]
    assert root[1].text == "Dead letters: 0 rows, 0 in total."


@pytest.mark.parametrize("width", [360, 720, 1000])
@pytest.mark.parametrize("minutes", [5, 59, 60, 61, 120])
@pytest.mark.parametrize("seconds", [0, 30, 59])
def test_time_labels_never_overlap(width, minutes, seconds):
    """Each HH:MM label of the time axis (11px, about 34px wide) keeps clear of its neighbours."""
    start = datetime(2026, 11, 24, 16, 0, seconds, tzinfo=UTC)
    buckets = [start + timedelta(minutes=i) for i in range(minutes)]
    for svg in (
        stacked_bars(buckets=buckets, series={"a": [40] * minutes}, colors={}, title="t", width=width),
        line_chart(
            buckets=buckets,
            series={"a": [1] * minutes, "b": [90] * minutes},
            colors={},
            title="t",
            units={"b": "s"},
            width=width,
        ),  # fmt: skip
    ):
        labels = sorted(float(x) for x, text in re.findall(r'<text x="([\d.]+)"[^>]*>(\d\d:\d\d)</text>', svg))
        assert labels, svg
        assert all(b - a >= 40 for a, b in itertools.pairwise(labels)), labels
