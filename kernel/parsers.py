"""A JSON parser with a size limit, a nesting limit, UTF-8 only and no duplicate keys.

DRF's parser reads the request stream itself, so Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` never
applies to a JSON body. This one refuses a body over the view's ``max_body_bytes`` (default
``API_MAX_BODY_BYTES``) with ``413``: at once when ``Content-Length`` says so, otherwise after
reading one byte past the limit, never the whole body.

Python's ``json`` recurses once per level of nesting: about 1,000 levels (a few KB of ``[``)
raise ``RecursionError``, and everything that walks the parsed value afterwards recurses too.
So a body nested deeper than ``MAX_JSON_DEPTH`` is refused as a ``parse_error`` before it is
parsed; no API body needs more than a few levels (checkout: 3).

The body is read as UTF-8 whatever ``charset`` the ``Content-Type`` names: RFC 8259 says JSON
exchanged between systems is UTF-8 and that a charset parameter "has no effect on compliant
recipients". DRF decoded with the declared charset, so brackets counted in the bytes were not
those parsed (cp500's ``[`` is another byte; utf-7 spells it ``+AFs-``): 5,000 of them were a
500. In UTF-8 an ASCII byte is always that character, so the depth counted on the bytes is the
depth parsed. A body that is not UTF-8 is a ``parse_error``.

An object that names a key twice (``{"quantity": 1, "quantity": 7}``) is refused too: Python
keeps the last value, other parsers the first, so the client and this server could each act on
a different order. The ``parse_error`` names each duplicated key by its path in ``errors``.
"""

import json

from django.conf import settings
from reliable_messaging.hosting import nested_deeper_than
from rest_framework.parsers import JSONParser
from rest_framework.utils.json import strict_constant

from kernel.exceptions import JSONParseError, PayloadTooLarge

MAX_JSON_DEPTH = 32
DUPLICATE_KEY = "Duplicate key: send each key of an object once."


def body_limit(view) -> int:
    return getattr(view, "max_body_bytes", None) or settings.API_MAX_BODY_BYTES


def duplicate_key_paths(value, duplicated: dict[int, list[str]], prefix: str = ""):
    """The paths (``items.0.quantity``, as in ``errors``) of the keys ``duplicated`` names per object."""
    if isinstance(value, dict):
        for key in duplicated.get(id(value), ()):
            yield f"{prefix}.{key}" if prefix else key
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, item in items:
        yield from duplicate_key_paths(item, duplicated, f"{prefix}.{key}" if prefix else str(key))


def parse_json(body: bytes):
    """The value of a UTF-8 JSON ``body``, or ``JSONParseError`` saying what is wrong with it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONParseError(f"JSON parse error - byte {exc.start} is not UTF-8; JSON is UTF-8 (RFC 8259).") from None
    if nested_deeper_than(body, MAX_JSON_DEPTH):
        raise JSONParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels.")
    duplicated = []  # (object, its duplicated keys): the reference keeps each id unique until the walk

    def unique_keys(pairs: list) -> dict:
        value = dict(pairs)
        if len(value) < len(pairs):
            seen: set[str] = set()
            duplicated.append((value, sorted({key for key, _ in pairs if key in seen or seen.add(key)})))
        return value

    try:
        value = json.loads(text, parse_constant=strict_constant, object_pairs_hook=unique_keys)
    except ValueError as exc:  # malformed, a NaN, a number too long to convert
        raise JSONParseError(f"JSON parse error - {exc}") from None
    if duplicated:
        paths = list(duplicate_key_paths(value, {id(obj): keys for obj, keys in duplicated}))
        raise JSONParseError(
            f"JSON parse error - duplicate key: {', '.join(paths)}.", errors={path: [DUPLICATE_KEY] for path in paths}
        )
    return value


class BoundedJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        limit = body_limit(parser_context.get("view"))
        declared = parser_context["request"].META.get("CONTENT_LENGTH") if "request" in parser_context else None
        if declared and str(declared).isdigit() and int(declared) > limit:
            raise PayloadTooLarge(limit)
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise PayloadTooLarge(limit)
        return parse_json(body)
