"""Every header and body is hostile until checked (reliable_messaging._edge): what a producer can put in a
message is refused with a reason, or read within bounds; nothing raises anything else."""

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from reliable_messaging._edge import MAX_COUNT, clamped_count, death_of, instant_within_window
from reliable_messaging._envelope import InvalidMessage, encode_body, parse_incoming
from reliable_messaging._metrics import event_type_label

HEADERS = {"event_type": "notes.note.written", "schema_version": 1}
BODY = encode_body({"order_id": "o-1"})


def refusal(body=BODY, headers=None, properties=None) -> tuple[str, str]:
    with pytest.raises(InvalidMessage) as refused:
        parse_incoming(body, properties or {"message_id": "m"}, {**HEADERS, **(headers or {})}, "rk")
    return refused.value.reason, refused.value.detail


@pytest.mark.parametrize("attempt", ["abc", "2", [1], -10, 0, True, 1.5, 2**40, None, {"n": 1}])
def test_an_attempt_that_is_not_an_integer_from_1_to_1000_is_refused_as_invalid_headers(attempt):
    reason, detail = refusal(headers={"x-attempt": attempt})

    assert reason == "invalid_headers"
    assert detail.startswith("x-attempt must be an integer from 1 to 1000: ")


@pytest.mark.parametrize("attempt", [1, 5, 1000])
def test_an_attempt_in_range_is_read(attempt):
    assert parse_incoming(BODY, {"message_id": "m"}, {**HEADERS, "x-attempt": attempt}, "rk").attempt == attempt


@pytest.mark.parametrize("depth", [33, 1_000, 100_000])
def test_a_body_nested_deeper_than_any_event_is_refused_as_invalid_payload_without_recursing(depth):
    assert refusal(body=b"[" * depth) == ("invalid_payload", "the body nests deeper than 32 levels")


def test_a_body_nested_as_deep_as_allowed_is_read():
    body = json.dumps({"a": json.loads("[" * 31 + "]" * 31)}).encode()

    assert parse_incoming(body, {"message_id": "m"}, HEADERS, "rk").payload["a"] == json.loads("[" * 31 + "]" * 31)


@pytest.mark.parametrize(
    "occurred_at",
    [
        "9999-12-31T23:59:59-14:00",  # year 10000 in UTC
        "9999-12-31T23:59:59+00:00",
        "1970-01-01T00:00:00+00:00",
        "2026-02-30T00:00:00+00:00",  # impossible
        "2026-01-01T00:00:00",  # no offset
        "yesterday",
        12,
        ["2026-01-01T00:00:00+00:00"],
        (datetime.now(UTC) + timedelta(days=2)).isoformat(),
    ],
)
def test_an_occurred_at_that_is_no_instant_of_this_system_is_refused_as_invalid_headers(occurred_at):
    reason, detail = refusal(headers={"occurred_at": occurred_at})

    assert reason == "invalid_headers"
    assert detail.startswith("occurred_at must be an ISO-8601 instant with its offset from 2000-01-01 to now + ")


def test_an_occurred_at_in_another_offset_is_read_in_utc():
    event = parse_incoming(BODY, {"message_id": "m"}, {**HEADERS, "occurred_at": "2026-11-25T10:00:00+02:00"}, "rk")

    assert event.occurred_at == "2026-11-25T08:00:00+00:00"


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"schema_version": True}, "invalid_schema_version"),
        ({"schema_version": 1.5}, "invalid_schema_version"),
        ({"schema_version": 10**15}, "invalid_schema_version"),
        ({"schema_version": "9" * 5000}, "invalid_schema_version"),
        ({"schema_version": -1}, "invalid_schema_version"),
        ({"event_type": "x" * 201}, "invalid_headers"),
        ({"event_type": "notes note written"}, "invalid_headers"),
        ({"event_type": "notes"}, "invalid_headers"),
    ],
)
def test_other_absurd_headers_are_refused_with_their_reason(headers, reason):
    assert refusal(headers=headers)[0] == reason


def test_a_message_id_that_is_not_text_is_refused():
    assert refusal(properties={"message_id": 7})[0] == "missing_message_id"


def test_the_content_hash_is_the_same_for_any_key_order_and_differs_with_the_content():
    def hashed(body: bytes) -> str:
        return parse_incoming(body, {"message_id": "m"}, HEADERS, "rk").content_hash

    assert hashed(b'{"a": 1, "b": 2}') == hashed(b'{"b":2,"a":1}')
    assert hashed(b'{"a": 1, "b": 2}') != hashed(b'{"a": 1, "b": 3}')


@pytest.mark.parametrize(
    ("x_death", "expected"),
    [
        ("x", ("dead_lettered", "q", "rk", 1, "x-death unreadable: str 'x'")),
        ([], ("dead_lettered", "q", "rk", 1, "x-death unreadable: list []")),
        (["x"], ("dead_lettered", "q", "rk", 1, "x-death unreadable: list ['x']")),
        ([{"count": "abc", "reason": "rejected"}], ("rejected", "q", "rk", 1, "x-death fields unreadable: count")),
        ([{"count": 2**40, "reason": "delivery_limit"}], ("delivery_limit", "q", "rk", MAX_COUNT,
                                                         f"x-death fields unreadable: count (clamped to {MAX_COUNT})")),
        ([{"count": -3, "reason": 7, "queue": ["a"], "routing-keys": "k"}],
         ("dead_lettered", "q", "rk", 1, "x-death fields unreadable: routing-keys, count, reason, queue")),
        ([{"count": 3, "reason": "expired", "queue": "archive_queue", "routing-keys": ["notes.note.written"]}],
         ("expired", "archive_queue", "notes.note.written", 3, "")),
    ],
)  # fmt: skip
def test_an_x_death_is_read_as_far_as_it_can_be(x_death, expected):
    death = death_of({"x-death": x_death}, default_queue="q", default_routing_key="rk")

    assert (death.reason, death.queue, death.routing_key, death.count, death.note) == expected


@pytest.mark.parametrize(("value", "expected"), [(5, 5), (0, 1), (-2, 1), ("7", 1), (True, 1), (2**40, MAX_COUNT)])
def test_a_count_for_a_column_is_clamped(value, expected):
    assert clamped_count(value) == expected


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-14:00", "2026-02-30T00:00:00+00:00", b"x", None, 5])
def test_an_instant_outside_the_window_or_unreadable_is_none(value):
    assert instant_within_window(value) is None


def test_a_metric_labels_an_event_type_no_context_publishes_as_other():
    assert event_type_label("notes.note.written") == "notes.note.written"
    assert event_type_label(f"made.up.{uuid.uuid4().hex}") == "other"


@pytest.mark.parametrize(
    ("body", "properties", "headers", "reason"),
    [
        (b'{"name": "a\\u0000b"}', {"message_id": "m"}, {}, "invalid_payload"),
        (BODY, {"message_id": "m\x00"}, {}, "invalid_headers"),
        (BODY, {"message_id": "m", "correlation_id": "c\x00"}, {}, "invalid_headers"),
        (BODY, {"message_id": "m"}, {"causation_id": "\x00"}, "invalid_headers"),
    ],
)
def test_a_nul_no_database_can_store_is_refused_at_the_edge(body, properties, headers, reason):
    assert refusal(body=body, properties=properties, headers=headers)[0] == reason
