"""Every console log line is one line: control characters in logged values are escaped.

A client chooses much of what is logged (a username typed at the admin's login, a header, an id a
publisher on the vhost put in a message); a CR or LF in it would start a line of its own in the
console log, which a reader (or a log shipper) takes for another event, and an ESC would drive the
reader's terminal. JSON lines need nothing: the JSON renderer escapes every control character."""

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# The console renderer shows a value with one of these through repr(), which escapes every control
# character; the event (the message) and any other value it shows as is.
_REPRESENTED = re.compile(r"[ \t=\r\n\"']")
_MULTI_LINE = {"exception", "stack"}  # tracebacks, rendered below the line


def escaped(text: str) -> str:
    """``text`` with each control character as its Python escape (``\\n``, ``\\x1b``, ``\\u2028``)."""
    return _CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


def escape_control_characters(logger, method_name, event_dict):
    """A structlog processor before the console renderer: escapes what it would print as is."""
    for key, value in event_dict.items():
        if isinstance(value, str) and key not in _MULTI_LINE and (key == "event" or not _REPRESENTED.search(value)):
            event_dict[key] = escaped(value)
    return event_dict
