"""OpenTelemetry spans for the outbox's hops: the message's creation, its publishing, its handling.

kombu has no OpenTelemetry instrumentation (kombu #1808), so messaging makes its own spans, after
the messaging semantic conventions and the way opentelemetry-instrumentation-pika does the AMQP hop:

- ``publish`` (the outbox) stores the context current when the event is *written*, the request's
  SERVER span or the CONSUMER span of the message being handled, with the row (``traceparent``,
  ``tracestate``), so the hop survives the transaction, a relay crash and any delay;
- the relay starts a PRODUCER span per message as that context's child, and the message carries
  the PRODUCER span as its ``traceparent``/``tracestate`` AMQP headers;
- the consumer starts a CONSUMER span per message as the child of the context the message carries,
  linked to the batch's span when messages are decided in a batch; the handler runs inside it, so
  what it publishes is that span's child in turn.

Spans are recorded only once ``enable`` has been called (a host calls it at start-up when the
``OTEL_*`` variables ask for an exporter). Otherwise the library records nothing (no SDK span is
made, no measurable cost) and each hop still gets a span id of its own under the caller's trace id
(``_untraced_child``), so trace ids keep reaching the logs and the next hop.
"""

import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SYSTEM = "rabbitmq"
TRACE_HEADERS = ("traceparent", "tracestate")
# The longest ``tracestate`` passed on: the outbox's column. W3C Trace Context asks every vendor to
# propagate at least 512 characters; OpenTelemetry accepts up to 8,192, which the row cannot store.
MAX_TRACESTATE = 512

_tracer: trace.Tracer | None = None
_w3c = TraceContextTextMapPropagator()


def enable(tracer: trace.Tracer) -> None:
    """Record messaging's spans with ``tracer`` (an SDK tracer with an exporter)."""
    global _tracer
    _tracer = tracer


def enabled() -> bool:
    return _tracer is not None


# --- contexts to and from carriers (outbox rows, AMQP headers, HTTP headers) --------------------
def context_from(carrier: Mapping[str, str]) -> Context:
    """The context ``carrier``'s W3C headers describe (an empty one when they are absent or invalid).

    Whoever sends them (an HTTP client, a publisher on the vhost) is not trusted: an invalid
    ``traceparent`` is ignored (a new trace), an invalid ``tracestate`` (bad member syntax, more
    than 32 members: OpenTelemetry's checks) or a longer one than ``MAX_TRACESTATE`` is dropped."""
    return _w3c.extract(_bounded({k: str(v) for k in TRACE_HEADERS if (v := carrier.get(k))}))


def trace_headers(span: Span | None = None) -> dict[str, str]:
    """``traceparent`` (and ``tracestate`` when there is one) of ``span``, or of the current span;
    empty when there is none. Never a ``tracestate`` over ``MAX_TRACESTATE``: with tracing on,
    Django's instrumentation reads the caller's headers itself, up to OpenTelemetry's 8,192."""
    carrier: dict[str, str] = {}
    context = trace.set_span_in_context(span) if span is not None else None
    _w3c.inject(carrier, context=context)
    return _bounded(carrier)


def _bounded(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` without a ``tracestate`` longer than ``MAX_TRACESTATE`` (the trace is kept)."""
    if len(headers.get("tracestate", "")) > MAX_TRACESTATE:
        del headers["tracestate"]
    return headers


def ids_of(span: Span) -> dict[str, str]:
    """``trace_id`` and ``span_id`` for log lines; empty when the span is not valid."""
    context = span.get_span_context()
    if not context.is_valid:
        return {}
    return {"trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}"}


def _untraced_child(parent: Context) -> Span:
    """A span context of our own under ``parent``'s trace (a new trace when there is none), with the
    caller's sampling flag and trace state kept: what a hop passes on when nothing is recorded."""
    parent_span = trace.get_current_span(parent).get_span_context()
    if parent_span.is_valid:
        trace_id, flags, state = parent_span.trace_id, parent_span.trace_flags, parent_span.trace_state
    else:
        trace_id, flags, state = _random_id(128), TraceFlags(TraceFlags.SAMPLED), None
    return NonRecordingSpan(SpanContext(trace_id, _random_id(64), False, flags, state))


def _random_id(bits: int) -> int:
    """A trace or span id as the SDK's RandomIdGenerator makes one (never 0, which is invalid)."""
    while not (value := random.getrandbits(bits)):
        pass
    return value


def start_span(
    name: str,
    *,
    kind: SpanKind,
    parent: Context,
    attributes: dict[str, Any] | None = None,
    links: list[Link] | None = None,
) -> Span:
    """A span to end by hand (``span.end()``); a non-recording one of our own when tracing is off."""
    if _tracer is None:
        return _untraced_child(parent)
    return _tracer.start_span(name, context=parent, kind=kind, attributes=attributes, links=links)


@contextmanager
def current(span: Span) -> Iterator[Span]:
    """``span`` as the current span inside (what ``publish`` captures), not ended on the way out."""
    with trace.use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
        yield span


# --- the three hops -------------------------------------------------------------------------------
def server_span(headers: Mapping[str, str]) -> Span:
    """The span serving an HTTP request: the instrumentation's SERVER span when tracing is on (it
    continued the caller's ``traceparent``), otherwise one of our own under the caller's trace."""
    span = trace.get_current_span()
    if span.is_recording():
        return span
    return _untraced_child(context_from(headers))


def creation_context(fallback: Mapping[str, str] | None = None) -> dict[str, str]:
    """What an outbox row stores of the context it is written in: the current span's headers, or
    ``fallback``'s (the message being handled, checked as any carrier) when no span is current."""
    headers = trace_headers()
    if not headers and fallback:
        headers = trace_headers(trace.get_current_span(context_from(fallback)))
    return headers


def messaging_attributes(
    *, operation: str, exchange: str, routing_key: str, message_id: str, correlation_id: str
) -> dict[str, str]:
    """The messaging semantic conventions' attributes common to every messaging span."""
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": exchange,
        "messaging.rabbitmq.destination.routing_key": routing_key,
        "messaging.message.id": message_id,
        "messaging.message.conversation_id": correlation_id,
    }


def producer_span(
    *, stored: Mapping[str, str], exchange: str, routing_key: str, message_id: str, correlation_id: str
) -> Span:
    """The relay's span for one message: a child of the context stored with its outbox row."""
    return start_span(
        f"send {routing_key}",
        kind=SpanKind.PRODUCER,
        parent=context_from(stored),
        attributes=messaging_attributes(
            operation="send",
            exchange=exchange,
            routing_key=routing_key,
            message_id=message_id,
            correlation_id=correlation_id,
        ),
    )


def batch_span(*, consumers: list[str], size: int) -> Span | None:
    """The span of a batch decided in one transaction (None for a lone message or tracing off)."""
    if _tracer is None or size < 2:
        return None
    return _tracer.start_span(
        "process batch",
        kind=SpanKind.INTERNAL,
        attributes={
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.batch.message_count": size,
            "messaging.consumer.group.name": ",".join(consumers),
        },
    )


def consumer_span(
    *,
    headers: Mapping[str, str],
    consumer: str,
    event_type: str,
    exchange: str,
    routing_key: str,
    message_id: str,
    correlation_id: str,
    batch: Span | None,
) -> Span:
    """The span of one handled message: a child of the context it carries, linked to its batch.
    Named after the event type: a retry arrives through another exchange and routing key."""
    attributes = messaging_attributes(
        operation="process",
        exchange=exchange,
        routing_key=routing_key,
        message_id=message_id,
        correlation_id=correlation_id,
    )
    attributes["messaging.consumer.group.name"] = consumer
    return start_span(
        f"process {event_type}",
        kind=SpanKind.CONSUMER,
        parent=context_from(headers),
        attributes=attributes,
        links=[Link(batch.get_span_context())] if batch is not None else None,
    )


def end_with_outcome(span: Span, *, outcome: str, reason: str = "", error: str = "") -> None:
    """Record how a message was settled on its span, then end it. Retries and dead letters are errors."""
    if span.is_recording():
        span.set_attribute("reliable_messaging.outcome", outcome)
        if outcome in ("retry", "dead_letter", "database_down"):
            span.set_attribute("error.type", reason or outcome)
            span.set_status(Status(StatusCode.ERROR, error or reason))
            if outcome == "dead_letter":
                span.add_event("dead_lettered", {"reason": reason, "error": error[:1000]})
    span.end()


def fail(span: Span, reason: str) -> None:
    """Mark a PRODUCER span whose message the broker refused."""
    if span.is_recording():
        span.set_attribute("error.type", "refused")
        span.set_status(Status(StatusCode.ERROR, reason))
