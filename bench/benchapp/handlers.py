"""A consumer handler that does only what every handler does: record the message (the inbox
row is written by messaging) and publish one event (an outbox row), in one transaction."""

from kernel import topology
from messaging.api import IncomingEvent, publish, register_handler

TICK = "bench.consumer.tick"
TOCK = "bench.consumer.tock"


def on_tick(event: IncomingEvent) -> None:
    publish(event_type=TOCK, payload=event.payload, aggregate_type="bench", aggregate_id=event.message_id)


def register() -> None:
    # The bench's own key joins inventory's bindings in the bench's processes only (BENCH_APP=1).
    if TICK not in topology.QUEUE_BINDINGS["inventory"]:
        topology.QUEUE_BINDINGS["inventory"] = (*topology.QUEUE_BINDINGS["inventory"], TICK)
    register_handler(consumer="inventory", event_type=TICK, handler=on_tick)
