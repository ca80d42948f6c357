"""Which consumer of this deployment handles which event type, read from the hosted contexts'
declarations (each context's ``consumes``: routing key -> handler) when messaging is ready.

A subscription is declared once, in the context's ``context.toml``: the same table binds its
queue (``reliable_messaging._topology``) and names the handler here, so the two cannot drift apart.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from reliable_messaging._declarations import DECLARATION_FILE, ContextDeclaration, DeclarationError, HandlerPolicy
from reliable_messaging._dotted import resolve
from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._readings import Reading, reading_of
from reliable_messaging._runs import takes_runs
from reliable_messaging._topology import ANY_EVENT, consumers, queue_bindings

# One message's (an IncomingEvent), or a run's (a list of them) when marked ``@in_runs``
# (reliable_messaging._runs); what it returns is not used.
Handler = Callable[[IncomingEvent], object] | Callable[[list[IncomingEvent]], object]


@dataclass(frozen=True)
class HandlerSpec:
    consumer: str
    event_type: str
    handler: Handler
    schema_versions: tuple[int, ...]
    # A context's reader: its messages are validated against their schema and upcast to the
    # newest version before the handler (reliable_messaging._contracts); the event log records them as they came.
    reading: Reading | None = None
    # as the declaration names it (the breaker's metric label), its retries and breaker, and the
    # exception classes its policy's never_retry names, resolved
    name: str = ""
    policy: HandlerPolicy = HandlerPolicy()
    never_retry: tuple[type[BaseException], ...] = ()

    @property
    def takes_runs(self) -> bool:
        """The handler takes a run of messages (a run of one when its message is decided alone)."""
        return takes_runs(self.handler)


_handlers: dict[str, dict[str, HandlerSpec]] = {}


class UnknownConsumer(ValueError):
    pass


def register_handler(
    *,
    consumer: str,
    event_type: str,
    handler: Handler,
    schema_versions: Iterable[int] = (1,),
    reading: Reading | None = None,
    name: str = "",
    policy: HandlerPolicy | None = None,
    never_retry: tuple[type[BaseException], ...] = (),
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
    policy = policy or HandlerPolicy()
    handlers[event_type] = HandlerSpec(
        consumer,
        event_type,
        handler,
        tuple(schema_versions),
        reading,
        name or f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', '?')}",
        policy,
        never_retry,
    )


def register_declared(declaration: ContextDeclaration) -> None:
    """Subscribe a hosted context's handlers, as its declaration names them; an undo's handler
    must name a command the context has a ``@participant`` handler of (its ``consumes`` or ``obeys``)."""
    handlers = {command: resolve(dotted) for command, dotted in {**declaration.obeys, **declaration.consumes}.items()}
    if problems := _fence_problems(handlers):
        raise DeclarationError(f"{declaration.package}/{DECLARATION_FILE}: " + "; ".join(problems))
    for event_type, handler in declaration.consumes.items():
        policy = declaration.handlers.get(handler, HandlerPolicy())
        register_handler(
            consumer=declaration.name,
            event_type=event_type,
            handler=handlers[event_type],
            reading=reading_of(declaration, event_type),
            name=handler,
            policy=policy,
            never_retry=tuple(_exception_class(declaration, handler, dotted) for dotted in policy.never_retry),
        )


def _fence_problems(handlers: Mapping[str, object]) -> list[str]:
    """An undo's handler (``@participant(undoes=...)``, reliable_messaging._saga_steps) naming a
    command the context has no ``@participant`` handler of: it would fence nothing."""
    return [
        f"{command}'s handler undoes {step!r}: no @participant handler of it here (consumes, obeys)"
        for command, handler in handlers.items()
        for step in getattr(handler, "fences", ())
        if not hasattr(handlers.get(step), "fences")
    ]


def _exception_class(declaration: ContextDeclaration, handler: str, dotted: str) -> type[BaseException]:
    """The exception class ``dotted`` names; else the start stops, naming the file and the key."""
    found: object
    try:
        found = resolve(dotted)
    except (ImportError, AttributeError) as exc:
        found = exc
    if isinstance(found, type) and issubclass(found, BaseException):
        return found
    raise DeclarationError(
        f"{declaration.package}/{DECLARATION_FILE}: handlers {handler!r}: never_retry {dotted!r} names no "
        f"exception class ({found})"
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
