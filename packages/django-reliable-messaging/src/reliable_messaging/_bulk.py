"""Bulk handlers: one call for a run of a consumer's messages in a batch, so that a context can
lock and read what the whole run needs in a few statements instead of a few per message.

A context marks its single-message handlers with the bulk handler that may take their messages
together (``@in_bulk(on_a, on_b)``); its declaration still names the single ones. In a batch's
first pass (``reliable_messaging._batch_decisions``), consecutive members of one consumer whose
handlers share a bulk handler are handed to it in one call, in the batch's order (the correlation
id, then arrival); every other member runs alone, in between, as before. A bulk handler must leave
what its single handlers would have left, run one after another in that order: should it fail,
the batch runs again with each member's single handler in a savepoint of its own.

Inside a bulk handler, ``in_turn(event)`` is where one message's work is done: what it publishes
names that message as its cause and continues its trace, as inside a single handler.
"""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar

from opentelemetry.trace import Span

from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._faults import fault_point
from reliable_messaging._outbox import handling
from reliable_messaging._telemetry import current

BulkHandler = Callable[[list[IncomingEvent]], None]
# What a bulk handler hands a service of its context: the n-th request's turn, where that
# request's work is done (``lambda n: in_turn(events[n])``).
Turn = Callable[[int], AbstractContextManager[None]]


class _Run:
    """The run being handled in bulk: its consumer, its members' spans, the turns taken so far."""

    def __init__(self, consumer: str, spans: dict[str, Span | None]) -> None:
        self.consumer, self.spans, self.turns = consumer, spans, 0


_run: ContextVar[_Run | None] = ContextVar("bulk_run", default=None)


def in_bulk(*handlers: Callable[..., object]) -> Callable[[BulkHandler], BulkHandler]:
    """Mark ``handlers`` (single-message handlers) as taken together by the decorated one."""

    def mark(bulk: BulkHandler) -> BulkHandler:
        for handler in handlers:
            handler.__dict__["bulk_handler"] = bulk  # an attribute of the function, read by bulk_handler_of
        return bulk

    return mark


def bulk_handler_of(handler: Callable[..., object]) -> BulkHandler | None:
    bulk: BulkHandler | None = getattr(handler, "bulk_handler", None)
    return bulk


def run_bulk_handler(bulk: BulkHandler, consumer: str, members: list[tuple[IncomingEvent, Span | None]]) -> None:
    """``bulk`` on a run of ``consumer``'s messages; ``members``: each message with its span (or None)."""
    token = _run.set(_Run(consumer, {event.message_id: span for event, span in members}))
    try:
        bulk([event for event, _ in members])
    finally:
        _run.reset(token)


@contextmanager
def in_turn(event: IncomingEvent) -> Iterator[None]:
    """Inside, ``event`` is the message being handled: its cause and span, as in a single handler.
    Between two turns is where crash tests stop a batch between two handlers, as between two
    single handlers (``consumer.<name>.between_handlers``)."""
    run = _run.get()
    span = run.spans.get(event.message_id) if run is not None else None
    if run is not None:
        run.turns += 1
        if run.turns > 1:
            fault_point(f"consumer.{run.consumer}.between_handlers")
    with handling(event), current(span) if span is not None else nullcontext():
        yield
