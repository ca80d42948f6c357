"""W3C Trace Context (traceparent) for requests and message hops.

Every hop (the checkout request, then each consumer handling a message) is a span of its own
under the same trace id: what it publishes carries its span as the parent.
"""

import re
import secrets

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
SAMPLED = "01"


def child_span(traceparent: str | None) -> str:
    """A new span under ``traceparent`` when that is valid, else the root of a new trace."""
    match = _TRACEPARENT.match((traceparent or "").strip())
    if match:
        version, trace_id, parent_id, flags, rest = match.groups()
        valid = (
            version != "ff"
            and (version != "00" or rest is None)  # version 00 has exactly four fields
            and trace_id != "0" * 32
            and parent_id != "0" * 16
        )
        if valid:
            return f"00-{trace_id}-{secrets.token_hex(8)}-{flags}"
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-{SAMPLED}"


def trace_id_of(traceparent: str) -> str:
    parts = traceparent.split("-")
    return parts[1] if len(parts) > 1 else ""
