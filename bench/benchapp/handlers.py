"""A consumer handler that does only what every handler does: record the message (the inbox
row is written by messaging) and publish one event (an outbox row), in one transaction."""

from messaging.api import IncomingEvent, publish, register_handler

TICK = "bench.consumer.tick"
TOCK = "bench.consumer.tock"


def on_tick(event: IncomingEvent) -> None:
    publish(event_type=TOCK, payload=event.payload, aggregate_type="bench", aggregate_id=event.message_id)


def register() -> None:
    register_handler(consumer="inventory", event_type=TICK, handler=on_tick)
