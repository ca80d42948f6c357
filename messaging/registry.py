"""Which consumer of this deployment handles which event type, filled by each hosted
context's ``AppConfig.ready()``.

The queues and their bindings are the system-wide declaration in ``kernel.topology``; a
handler may only be registered for a key its consumer's queue is bound to, so the two cannot
drift apart silently. A consumer exists in a deployment once a hosted context registered a
handler for it.
"""

from collections.abc import Callable
from dataclasses import dataclass

from kernel.topology import ANY_EVENT, CONSUMERS, QUEUE_BINDINGS


@dataclass(frozen=True)
class HandlerSpec:
    consumer: str
    event_type: str
    handler: Callable
    schema_versions: tuple[int, ...]
    # Optional: handles many events at once (in a batch), e.g. with one bulk insert.
    bulk_handler: Callable | None = None


_handlers: dict[str, dict[str, HandlerSpec]] = {}


class UnknownConsumer(ValueError):
    pass


def register_handler(
    *, consumer: str, event_type: str, handler: Callable, schema_versions=(1,), bulk_handler: Callable | None = None
) -> None:
    if consumer not in QUEUE_BINDINGS:
        raise UnknownConsumer(f"unknown consumer {consumer!r}: declare its queue in kernel/topology.py")
    if event_type not in QUEUE_BINDINGS[consumer]:
        raise ValueError(f"{consumer}_queue is not bound to {event_type!r}: add the key in kernel/topology.py")
    handlers = _handlers.setdefault(consumer, {})
    existing = handlers.get(event_type)
    if existing and existing.handler is not handler:
        raise ValueError(f"{consumer} already has a handler for {event_type}")
    handlers[event_type] = HandlerSpec(consumer, event_type, handler, tuple(schema_versions), bulk_handler)


def local_consumers() -> list[str]:
    """The consumers this deployment runs, in the topology's order."""
    return [c for c in CONSUMERS if _handlers.get(c)]


def handler_for(consumer: str, event_type: str) -> HandlerSpec | None:
    handlers = _handlers.get(consumer, {})
    return handlers.get(event_type) or handlers.get(ANY_EVENT)


def registered_keys(consumer: str) -> list[str]:
    return sorted(_handlers.get(consumer, {}))


def binding_keys(consumer: str) -> list[str]:
    """What ``consumer``'s queue is bound to, hosted here or not."""
    return sorted(QUEUE_BINDINGS[consumer])
