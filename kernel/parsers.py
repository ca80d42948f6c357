"""A JSON parser with a size limit and a nesting limit.

DRF's parser reads the request stream itself, so Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` never
applies to a JSON body. This one refuses a body over the view's ``max_body_bytes`` (default
``API_MAX_BODY_BYTES``) with ``413``: at once when ``Content-Length`` says so, otherwise after
reading one byte past the limit, never the whole body.

Python's ``json`` recurses once per level of nesting: about 1,000 levels (a few KB of ``[``)
raise ``RecursionError``, and everything that walks the parsed value afterwards recurses too.
So a body nested deeper than ``MAX_JSON_DEPTH`` is refused as a ``parse_error`` before it is
parsed; no API body needs more than a few levels (checkout: 3).
"""

import io
import re

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from kernel.exceptions import PayloadTooLarge

MAX_JSON_DEPTH = 32

# One token per match, left to right: a whole string (possessive, so it never backtracks), a
# bracket, or a quote that opens no complete string (the JSON is malformed from there on).
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*+"|[\[\]{}]|"', re.DOTALL)
_OPENING = frozenset(b"[{")


def body_limit(view) -> int:
    return getattr(view, "max_body_bytes", None) or settings.API_MAX_BODY_BYTES


def nested_deeper_than(body: bytes, limit: int) -> bool:
    """Whether arrays and objects in ``body`` nest more than ``limit`` levels deep (brackets
    inside strings do not count). Linear in the body's length."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False  # cannot nest deeper than it has brackets: the usual case, at C speed
    depth = 0
    for token in _TOKENS.finditer(body):
        first = token.group()[0]
        if first in _OPENING:
            depth += 1
            if depth > limit:
                return True
        elif first != ord('"'):
            depth -= 1
        elif len(token.group()) == 1:
            return False  # an unterminated string: the parser refuses the body at this point
    return False


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
        if nested_deeper_than(body, MAX_JSON_DEPTH):
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels.")
        return super().parse(io.BytesIO(body), media_type, parser_context)
