"""W3C trace context: a request's traceparent is continued with a span of our own, anything else
starts a new trace (tracing off: no OTEL_* variables). tests/e2e/test_tracing_across_processes.py
follows one through every process."""

import re

import pytest
from reliable_messaging.hosting import server_span, trace_headers

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


def continue_trace(header: str | None) -> str:
    """The traceparent of the span a request with this header is served in (tracing off)."""
    return trace_headers(server_span({} if header is None else {"traceparent": header}))["traceparent"]


def test_a_valid_traceparent_is_continued_with_a_span_of_our_own():
    child = continue_trace(INCOMING)
    assert TRACEPARENT.match(child)
    version, trace_id, span_id, flags = child.split("-")
    assert (version, trace_id, flags) == ("00", TRACE_ID, "01")
    assert span_id != "00f067aa0ba902b7"


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        f"00-{'0' * 32}-00f067aa0ba902b7-01",  # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
        f"ff-{TRACE_ID}-00f067aa0ba902b7-01",  # forbidden version
        f"00-{TRACE_ID.upper()}-00f067aa0ba902b7-01",  # upper case hex
        f"00-{TRACE_ID}-00f067aa0ba902b7-01-extra",  # version 00 has four fields
    ],
)
def test_anything_else_starts_a_new_trace(header):
    new = continue_trace(header)
    assert TRACEPARENT.match(new)
    assert new.split("-")[1] not in (TRACE_ID, TRACE_ID.upper(), "0" * 32)


def test_a_future_version_is_read_as_version_00():
    assert continue_trace(f"01-{TRACE_ID}-00f067aa0ba902b7-00-more").split("-")[1:4:2] == [TRACE_ID, "00"]


def test_a_span_holding_an_oversized_tracestate_passes_on_its_trace_without_it():
    """A host's instrumentation may extract a caller's tracestate itself (OpenTelemetry takes up to
    8,192 characters); the outbox's column holds 512: the trace goes on, the state is dropped."""
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

    # Three valid members, 519 characters in all: valid for OpenTelemetry, not for the row.
    state = TraceState([("a", "x" * 255), ("b", "y" * 255), ("c", "z")])
    span = NonRecordingSpan(SpanContext(int(TRACE_ID, 16), 0xB7AD6B7169203331, True, TraceFlags(1), state))
    assert trace_headers(span) == {"traceparent": f"00-{TRACE_ID}-b7ad6b7169203331-01"}
