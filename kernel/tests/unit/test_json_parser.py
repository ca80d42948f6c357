"""The API's JSON parser on exact bytes: UTF-8 whatever the declared charset, a nesting limit
counted on what is parsed, and no object naming a key twice (issue 26, rows 7 and 9)."""

import io

import pytest
from rest_framework.exceptions import ParseError

from kernel.parsers import DUPLICATE_KEY, BoundedJSONParser

DEEP = "JSON parse error - nested deeper than 32 levels."


def parse(body: bytes, charset: str | None = None):
    """What the API's parser makes of ``body`` sent with ``Content-Type: application/json; charset=...``:
    DRF hands the declared charset to the parser as ``encoding``."""
    context = {"encoding": charset} if charset else {}
    return BoundedJSONParser().parse(io.BytesIO(body), "application/json", context)


def refusal(body: bytes, charset: str | None = None) -> tuple[str, dict | None]:
    with pytest.raises(ParseError) as refused:
        parse(body, charset)
    return str(refused.value.detail), refused.value.errors


@pytest.mark.parametrize(
    ("charset", "body", "detail"),
    [
        # 5,000 "[" in the declared charset's own bytes: DRF decoded them into 5,000 brackets (a 500).
        ("cp500", "[".encode("cp500") * 5000, "JSON parse error - Expecting value: line 1 column 1 (char 0)"),
        ("cp1026", "[".encode("cp1026") * 5000, "JSON parse error - Expecting value: line 1 column 1 (char 0)"),
        ("utf-7", b"+AFs-" * 5000, "JSON parse error - Expecting value: line 1 column 1 (char 0)"),
        ("utf-16", "[".encode("utf-16-le") * 5000, DEEP),
        # The same in ASCII, counted as the brackets they are.
        ("cp500", b"[" * 5000, DEEP),
        ("utf-7", b"[" * 5000, DEEP),
        # Bytes that are not UTF-8, whatever they spell in the declared charset.
        ("cp500", b"\xba" * 5000, "JSON parse error - byte 0 is not UTF-8; JSON is UTF-8 (RFC 8259)."),
        (
            "latin-1",
            '{"customer_id": "\xe9"}'.encode("latin-1"),
            "JSON parse error - byte 17 is not UTF-8; JSON is UTF-8 (RFC 8259).",
        ),
    ],
)
def test_the_body_is_read_as_utf_8_whatever_charset_the_content_type_names(charset, body, detail):
    assert refusal(body, charset) == (detail, None)


def test_a_valid_body_parses_the_same_under_any_declared_charset():
    body = '{"customer_id": "\u00e9", "items": [{"sku": "WIDGET", "quantity": 1}]}'.encode()

    for charset in (None, "utf-8", "cp500", "utf-7", "latin-1", "zlib"):
        assert parse(body, charset) == {"customer_id": "\u00e9", "items": [{"sku": "WIDGET", "quantity": 1}]}


def test_an_object_naming_a_key_twice_is_refused_with_each_duplicate_by_its_path():
    assert refusal(b'{"quantity": 1, "quantity": 7}') == (
        "JSON parse error - duplicate key: quantity.",
        {"quantity": [DUPLICATE_KEY]},
    )
    body = b'{"items": [{"sku": "W", "quantity": 1, "quantity": 7}], "meta": {"b": 1, "a": 2, "b": 3, "a": 4}}'
    assert refusal(body) == (
        "JSON parse error - duplicate key: items.0.quantity, meta.a, meta.b.",
        {"items.0.quantity": [DUPLICATE_KEY], "meta.a": [DUPLICATE_KEY], "meta.b": [DUPLICATE_KEY]},
    )
    # The same key in sibling objects, or spelt differently, is no duplicate.
    assert parse(b'[{"a": 1}, {"a": 2}, {"A": 3, "a": 4}]') == [{"a": 1}, {"a": 2}, {"A": 3, "a": 4}]


def test_a_duplicate_inside_a_value_that_a_duplicate_replaced_is_named_by_the_outer_one():
    assert refusal(b'{"x": {"y": 1, "y": 2}, "x": 3}') == (
        "JSON parse error - duplicate key: x.",
        {"x": [DUPLICATE_KEY]},
    )


def test_other_malformed_bodies_stay_a_parse_error():
    assert refusal(b'{"a": NaN}') == (
        "JSON parse error - Out of range float values are not JSON compliant: 'NaN'",
        None,
    )
    assert (
        refusal(b"\xef\xbb\xbf{}")[0]
        == "JSON parse error - Unexpected UTF-8 BOM (decode using utf-8-sig): line 1 column 1 (char 0)"
    )
    assert refusal(b"[" * 33 + b"]" * 33) == (DEEP, None)
    assert parse(b"[" * 32 + b"]" * 32) == [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
