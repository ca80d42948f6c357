"""OpenTelemetry spans of every hop, with a tracer of the test's own (reliable_messaging._telemetry.enable):
what a request writes continues its trace; the relay's PRODUCER span per message is the child of
the span the row was written in; the consumer's CONSUMER span per message is the child of its
PRODUCER span and linked to its batch's span; what a handler publishes is the child of that CONSUMER
span; a dead letter's CONSUMER span is an error with its reason. The relay and the consumer loop
run in the test's process (retrying/bus.py), on both backends."""

from collections import Counter

import pytest
from archive.models import Refusal
from notes.services import write_note
from reliable_messaging import _telemetry as telemetry
from reliable_messaging.models import OutboxMessage
from retrying.bus import bus, consume, relay  # noqa: F401 - bus: the fixture

from conftest import amqp, drained

sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="the extra 'otel'")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

pytestmark = pytest.mark.usefixtures("bus")

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
REFUSED_TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture
def spans(monkeypatch, empty_queues):
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "_tracer", provider.get_tracer("tests"))
    yield exporter
    if amqp():
        drained("archive_queue")  # the retrying contexts' messages reach it too


def hex_id(number: int, width: int) -> str:
    return f"{number:0{width}x}"


def in_trace(exporter, trace_id: str) -> list:
    return [s for s in exporter.get_finished_spans() if hex_id(s.context.trace_id, 32) == trace_id]


def request(trace_id: str, *texts: str):
    """A request that continues the caller's trace and writes notes in its SERVER span."""
    parent = telemetry.context_from({"traceparent": f"00-{trace_id}-{CALLER_SPAN}-01"})
    server = telemetry.start_span("POST /notes/", kind=SpanKind.SERVER, parent=parent)
    with telemetry.current(server):
        notes = [write_note(text) for text in texts]
    server.end()
    return server, notes


def test_every_hop_is_one_trace_of_producer_and_consumer_spans(spans):
    server, notes = request(TRACE_ID, "first", "second")
    relay()
    consume("archive", batch_size=10)  # the handler publishes archive.note.filed (no queue takes it)

    rows = {str(row.event_id): row for row in OutboxMessage.objects.all()}
    assert Counter(row.event_type for row in rows.values()) == {"notes.note.written": 2, "archive.note.filed": 2}
    server_id = hex_id(server.get_span_context().span_id, 16)
    for row in rows.values():
        if row.event_type == "notes.note.written":
            assert row.traceparent == f"00-{TRACE_ID}-{server_id}-01"
    trace = in_trace(spans, TRACE_ID)

    # each event has one PRODUCER span from the relay, the child of the span it was written in,
    # and the message carried that PRODUCER span
    producers = {s.attributes["messaging.message.id"]: s for s in trace if s.kind is SpanKind.PRODUCER}
    assert sorted(producers) == sorted(m for m, row in rows.items() if row.event_type == "notes.note.written")
    for message_id, producer in producers.items():
        row = rows[message_id]
        assert producer.name == f"send {row.event_type}"
        assert dict(producer.attributes) == {
            "messaging.system": "rabbitmq",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": "events",
            "messaging.rabbitmq.destination.routing_key": row.event_type,
            "messaging.message.id": message_id,
            "messaging.message.conversation_id": row.correlation_id,
        }
        assert producer.status.is_ok
    for note in notes:
        written = OutboxMessage.objects.get(event_type="notes.note.written", aggregate_id=str(note.id))
        assert hex_id(producers[str(written.event_id)].parent.span_id, 16) == server_id

    # each message the archive handled has one CONSUMER span, the child of its PRODUCER span
    consumers = [s for s in trace if s.kind is SpanKind.CONSUMER]
    assert sorted(s.attributes["messaging.message.id"] for s in consumers) == sorted(
        message_id for message_id, row in rows.items() if row.event_type == "notes.note.written"
    )
    for span in consumers:
        message_id = span.attributes["messaging.message.id"]
        assert span.parent.span_id == producers[message_id].context.span_id
        assert span.name == "process notes.note.written"
        assert span.attributes["messaging.consumer.group.name"] == "archive"
        assert (span.attributes["messaging.system"], span.attributes["messaging.operation.type"]) == (
            "rabbitmq",
            "process",
        )
        assert span.attributes["messaging.message.conversation_id"] == rows[message_id].correlation_id
        assert span.attributes["reliable_messaging.outcome"] == "handled"
        assert span.status.is_ok

    # decided in a batch: linked to the batch's span (a trace of its own: it serves many traces)
    linked = {link.context.span_id for span in consumers for link in span.links}
    batches = [s for s in spans.get_finished_spans() if s.context.span_id in linked]
    assert len(batches) == 1
    [batch] = batches
    assert (batch.name, batch.kind, batch.parent) == ("process batch", SpanKind.INTERNAL, None)
    assert batch.attributes["messaging.batch.message_count"] >= 2

    # what the handler published is written in the CONSUMER span that handled its cause: the
    # relay's PRODUCER span for it will be that span's child
    consumer_of = {s.attributes["messaging.message.id"]: s for s in consumers}
    for row in rows.values():
        if row.event_type == "archive.note.filed":
            cause = hex_id(consumer_of[row.causation_id].context.span_id, 16)
            assert row.traceparent == f"00-{TRACE_ID}-{cause}-01"


def test_a_message_that_becomes_a_dead_letter_has_an_error_span_with_the_reason(spans):
    Refusal.objects.create(text="refused")
    request(REFUSED_TRACE, "refused")
    relay()
    consume("archive")

    [refused] = [s for s in in_trace(spans, REFUSED_TRACE) if s.kind is SpanKind.CONSUMER]
    [producer] = [s for s in in_trace(spans, REFUSED_TRACE) if s.kind is SpanKind.PRODUCER]
    assert refused.parent.span_id == producer.context.span_id
    assert not refused.status.is_ok and refused.attributes["error.type"] == "invalid_payload"
    assert refused.attributes["reliable_messaging.outcome"] == "dead_letter"
    assert [event.name for event in refused.events] == ["dead_lettered"]
    assert refused.events[0].attributes["reason"] == "invalid_payload"
