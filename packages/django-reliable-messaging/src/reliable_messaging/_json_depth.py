"""How deep a JSON body nests, found before parsing it (a deep body costs the parser's stack)."""

import re

# One token per match, left to right: a whole string (possessive, so it never backtracks), a
# bracket, or a quote that opens no complete string (the JSON is malformed from there on).
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*+"|[\[\]{}]|"', re.DOTALL)
_OPENING = frozenset(b"[{")


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
