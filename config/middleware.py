"""W3C Trace Context for every request: continue the caller's trace or start one.

The request gets a span id of its own under the caller's trace id; events published while
serving it store that ``traceparent`` in the outbox, the relay sends it as a message header,
and what each consumer publishes in turn carries it on, so one trace id follows the order
through every hop. The response says which span served it (``traceresponse``, Trace Context
Level 2). Log lines of the request carry ``trace_id``.
"""

import structlog

from messaging.api import child_span, trace_id_of, tracing


class TraceparentMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        traceparent = child_span(request.headers.get("traceparent"))
        with tracing(traceparent), structlog.contextvars.bound_contextvars(trace_id=trace_id_of(traceparent)):
            response = self.get_response(request)
        response["traceresponse"] = traceparent
        return response
