"""W3C Trace Context for every request: continue the caller's trace or start one.

The request gets a span id of its own under the caller's trace id; events published while
serving it store that ``traceparent`` in the outbox, the relay sends it as a message header,
and what each consumer publishes in turn carries it on, so one trace id follows the order
through every hop. The response says which span served it (``traceresponse``, Trace Context
Level 2). Log lines of the request carry ``trace_id``.
"""

import re
import secrets

import structlog

from messaging.api import tracing

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
SAMPLED = "01"


def continue_trace(header: str | None) -> str:
    """The traceparent of this request's span: a child of ``header`` when that is valid."""
    match = _TRACEPARENT.match((header or "").strip())
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
    return traceparent.split("-")[1]


class TraceparentMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        traceparent = continue_trace(request.headers.get("traceparent"))
        with tracing(traceparent), structlog.contextvars.bound_contextvars(trace_id=trace_id_of(traceparent)):
            response = self.get_response(request)
        response["traceresponse"] = traceparent
        return response
