"""Which consumer of this deployment handles which event type, read from the hosted contexts'
declarations (each context's ``consumes``: routing key -> handler) when messaging is ready.

A subscription is declared once, in the context's ``context.toml``: the same table binds its
queue (``reliable_messaging._topology``) and names the handler here, so the two cannot drift apart.
"""

from collections.abc import Callable
from dataclasses import dataclass

from reliable_messaging._bulk import bulk_handler_of
from reliable_messaging._declarations import ContextDeclaration
from reliable_messaging._dotted import resolve
from reliable_messaging._readings import Reading, reading_of
from reliable_messaging._topology import ANY_EVENT, consumers, queue_bindings


@dataclass(frozen=True)
class HandlerSpec:
    consumer: str
    event_type: str
    handler: Callable
    schema_versions: tuple[int, ...]
    # Optional: takes a run of a batch's events at once, e.g. with one bulk insert (reliable_messaging._bulk).
    bulk_handler: Callable | None = None
    # A context's reader: its messages are validated against their schema and upcast to the
    # newest version before the handler (reliable_messaging._contracts); the event log records them as they came.
    reading: Reading | None = None


_handlers: dict[str, dict[str, HandlerSpec]] = {}


class UnknownConsumer(ValueError):
    pass


def register_handler(
    *,
    consumer: str,
    event_type: str,
    handler: Callable,
    schema_versions=(1,),
    bulk_handler: Callable | None = None,
    reading: Reading | None = None,
) -> None:
    bindings = queue_bindings()
    if consumer not in bindings:
        raise UnknownConsumer(f"unknown consumer {consumer!r}: no installed context declares it")
    if event_type not in bindings[consumer]:
        raise ValueError(f"{consumer}_queue is not bound to {event_type!r}: declare it under consumes")
    handlers = _handlers.setdefault(consumer, {})
    existing = handlers.get(event_type)
    if existing and existing.handler is not handler:
        raise ValueError(f"{consumer} already has a handler for {event_type}")
    if reading is not None:
        schema_versions = reading.versions
    handlers[event_type] = HandlerSpec(consumer, event_type, handler, tuple(schema_versions), bulk_handler, reading)


def register_declared(declaration: ContextDeclaration) -> None:
    """Subscribe a hosted context's handlers, as its declaration names them."""
    for event_type, handler in declaration.consumes.items():
        register_handler(
            consumer=declaration.name,
            event_type=event_type,
            handler=(single := resolve(handler)),
            bulk_handler=bulk_handler_of(single),
            reading=reading_of(declaration, event_type),
        )


def local_consumers() -> list[str]:
    """The consumers this deployment runs, in the topology's order."""
    return [c for c in consumers() if _handlers.get(c)]


def handler_for(consumer: str, event_type: str) -> HandlerSpec | None:
    handlers = _handlers.get(consumer, {})
    return handlers.get(event_type) or handlers.get(ANY_EVENT)


def registered_keys(consumer: str) -> list[str]:
    return sorted(_handlers.get(consumer, {}))


def binding_keys(consumer: str) -> list[str]:
    """What ``consumer``'s queue is bound to, hosted here or not."""
    return sorted(queue_bindings()[consumer])
