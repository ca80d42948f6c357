"""A consumer handler that does only what every handler does: record the message (the inbox
row is written by messaging) and publish one event (an outbox row), in one transaction.
Subscribed by bench/benchapp/context.toml, like any context's handler."""

from reliable_messaging.api import IncomingEvent, publish

TICK = "bench.consumer.tick"
TOCK = "bench.consumer.tock"


def on_tick(event: IncomingEvent) -> None:
    publish(event_type=TOCK, payload=event.payload, aggregate_type="bench", aggregate_id=event.message_id)
