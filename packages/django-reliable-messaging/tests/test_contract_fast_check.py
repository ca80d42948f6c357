"""The compiled check of event payloads (jsonschema_rs) only spares work: it may accept a payload
only where jsonschema accepts it, and every refusal still names its field in jsonschema's words.

For every schema the installed contexts declare, its example payload and a few hundred hostile
variants of it (each value replaced, each required key dropped, keys added; only what
``json.loads`` can make, as a message's body does) are judged by both. jsonschema_rs comes with the
extra ``fast``: without it, everything is jsonschema's and the comparison is skipped.
"""

import copy
import json
from decimal import Decimal

import pytest
from reliable_messaging import _contracts as contracts
from reliable_messaging._contracts import schemas, validation_error
from reliable_messaging.testing import example_payload

PRICED = "notes.note.priced"  # formats, patterns, an enum, nested lines

HOSTILE_VALUES = [
    None,
    "",
    "x" * 5000,
    -1,
    0,
    1.5,
    2.0,
    -0.0,
    1e308,
    float("nan"),  # json.loads takes NaN and Infinity
    float("inf"),
    float("-inf"),
    10**30,
    True,
    False,
    "12.50\n",  # Python's $ matches before a final newline; the compiled pattern's does not
    "１２.50",  # full-width digits
    "12.5",
    "\ud800",  # a lone surrogate: the compiled check cannot even take it
    "usd",
    "USD\n",
    "EUR",
    "{12345678-1234-1234-1234-1234567890ab}",
    "urn:uuid:12345678-1234-1234-1234-1234567890ab",
    "12345678-1234-1234-1234-1234567890a-b",
    "12345678123412341234123456789 0ab",
    "12345678-1234-1234-1234-1234567890AB",
    [],
    [{}],
    {},
    {"": None},
]


def leaf_paths(value, path=()):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from leaf_paths(inner, (*path, key))
    elif isinstance(value, list):
        for n, inner in enumerate(value):
            yield from leaf_paths(inner, (*path, n))
    yield path


def replaced(payload, path, value):
    changed = copy.deepcopy(payload)
    if not path:
        return value
    holder = changed
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    return changed


def dropped(payload, path):
    changed = copy.deepcopy(payload)
    holder = changed
    for step in path[:-1]:
        holder = holder[step]
    if isinstance(holder, dict):
        del holder[path[-1]]
    return changed


def variants(payload):
    for path in leaf_paths(payload):
        for value in HOSTILE_VALUES:
            yield replaced(payload, path, value)
        if path:
            yield dropped(payload, path)
            yield replaced(payload, path[:-1], {"extra": 1}) if path[:-1] else {**payload, "extra": 1}


SCHEMAS = sorted(schemas())


@pytest.mark.parametrize(("event_type", "version"), SCHEMAS, ids=[f"{t}.v{v}" for t, v in SCHEMAS])
def test_the_compiled_check_accepts_only_what_jsonschema_accepts(event_type, version):
    pytest.importorskip("jsonschema_rs", reason="the extra 'fast' is not installed here")
    slow, fast = contracts._validators(event_type, version)
    assert fast is not None, "jsonschema_rs compiles every schema"
    example = example_payload(event_type, version)
    assert contracts._passes_fast_check(fast, example)  # the valid payloads take the fast way

    verdicts = {"accepted": 0, "refused": 0, "left to jsonschema": 0}
    for payload in variants(example):
        payload = json.loads(json.dumps(payload))  # as a body decodes: lists, never tuples
        fast_says = contracts._passes_fast_check(fast, payload)
        error = validation_error(event_type, version, payload, decoded_json=True)
        assert (error == "") == slow.is_valid(payload), (payload, error)  # jsonschema's verdict, always
        verdicts["accepted" if fast_says else "refused" if error else "left to jsonschema"] += 1
    assert verdicts["accepted"] > 0 and verdicts["refused"] > len(HOSTILE_VALUES), verdicts


def test_values_json_cannot_hold_are_judged_by_jsonschema_alone():
    # An upcaster's result is Python, not decoded JSON: jsonschema_rs would take this tuple as an
    # array and these Decimals as numbers; jsonschema refuses them, and its verdict is the one.
    payload = example_payload(PRICED, 1)
    as_tuple = {**payload, "lines": tuple(payload["lines"])}
    as_decimal = {**payload, "lines": [{**payload["lines"][0], "count": Decimal(2)}]}

    assert validation_error(PRICED, 1, as_tuple) == (
        "notes.note.priced v1 at lines: " + repr(as_tuple["lines"]) + " is not of type 'array'"
    )
    assert "is not of type 'integer'" in validation_error(PRICED, 1, as_decimal)


def test_a_refusal_still_names_the_field_in_jsonschemas_words():
    payload = {**example_payload(PRICED, 1), "reason": "nope"}

    assert validation_error(PRICED, 1, payload) == (
        "notes.note.priced v1 at reason: 'nope' is not one of ['priced_by_word']"
    )


def test_a_lone_surrogate_is_judged_by_jsonschema():
    payload = {**example_payload(PRICED, 1), "remark": "\ud800"}

    assert validation_error(PRICED, 1, payload) == ""  # any string is a remark
