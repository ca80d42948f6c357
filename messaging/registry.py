"""Which consumer handles which event type, filled by each context's ``AppConfig.ready()``.

The broker bindings are derived from here, so a queue is bound to exactly the keys its
context handles.
"""

from collections.abc import Callable
from dataclasses import dataclass

# The binding key and registry entry of a consumer that takes every event (the event log).
ANY_EVENT = "#"
CONSUMERS = ("orders", "payments", "inventory", "events")


@dataclass(frozen=True)
class HandlerSpec:
    consumer: str
    event_type: str
    handler: Callable
    schema_versions: tuple[int, ...]


_handlers: dict[str, dict[str, HandlerSpec]] = {name: {} for name in CONSUMERS}


def register_handler(*, consumer: str, event_type: str, handler: Callable, schema_versions=(1,)) -> None:
    if consumer not in _handlers:
        raise ValueError(f"unknown consumer {consumer!r}; known: {', '.join(CONSUMERS)}")
    existing = _handlers[consumer].get(event_type)
    if existing and existing.handler is not handler:
        raise ValueError(f"{consumer} already has a handler for {event_type}")
    _handlers[consumer][event_type] = HandlerSpec(consumer, event_type, handler, tuple(schema_versions))


def handler_for(consumer: str, event_type: str) -> HandlerSpec | None:
    handlers = _handlers[consumer]
    return handlers.get(event_type) or handlers.get(ANY_EVENT)


def binding_keys(consumer: str) -> list[str]:
    return sorted(_handlers[consumer])
