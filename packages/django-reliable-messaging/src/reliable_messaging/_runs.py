"""Run handlers: one call for a run of a consumer's messages, so that a context can lock and read
what the whole run needs in a few statements instead of a few per message.

A handler marked ``@in_runs`` takes a list of messages instead of one; its context's declaration
names it under ``consumes`` as any handler (for one key or several). In a batch's first pass
(``reliable_messaging._batch_decisions``), consecutive members of one consumer whose handler is
the same run handler are handed to it in one call, in the batch's order (the correlation id, then
arrival); every other member runs alone, in between. Wherever a message is decided on its own (a
lone delivery, a redelivery, the batch's savepoint pass after a failure, a deadlock's loser) the
run handler gets a run of one. So a run handler must leave, for a run, what it leaves for each of
its members as a run of one, one after another in that order.

Inside a run handler, ``in_turn(event)`` is where one message's work is done: what it publishes
names that message as its cause and continues its trace, as inside a single-message handler.
"""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar

from opentelemetry.trace import Span

from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._faults import fault_point
from reliable_messaging._outbox import handling
from reliable_messaging._telemetry import current

RunHandler = Callable[[list[IncomingEvent]], None]
# What a run handler hands a service of its context: the n-th request's turn, where that
# request's work is done (``lambda n: in_turn(events[n])``).
Turn = Callable[[int], AbstractContextManager[None]]


class _Run:
    """The run being handled: its consumer, its members' spans, the turns taken so far."""

    def __init__(self, consumer: str, spans: dict[str, Span | None]) -> None:
        self.consumer, self.spans, self.turns = consumer, spans, 0


_run: ContextVar[_Run | None] = ContextVar("run", default=None)


def in_runs(handler: RunHandler) -> RunHandler:
    """Mark ``handler`` as taking a run of messages (a list of ``IncomingEvent``) instead of one."""
    handler.__dict__["takes_runs"] = True  # an attribute of the function, read by takes_runs
    return handler


def takes_runs(handler: Callable[..., object]) -> bool:
    return getattr(handler, "takes_runs", False) is True


def run_handler_on(handler: RunHandler, consumer: str, members: list[tuple[IncomingEvent, Span | None]]) -> None:
    """``handler`` on a run of ``consumer``'s messages; ``members``: each message with its span (or None)."""
    token = _run.set(_Run(consumer, {event.message_id: span for event, span in members}))
    try:
        handler([event for event, _ in members])
    finally:
        _run.reset(token)


@contextmanager
def in_turn(event: IncomingEvent) -> Iterator[None]:
    """Inside, ``event`` is the message being handled: its cause and span, as in a single-message
    handler. Between two turns is where crash tests stop a batch between two handlers, as between
    two single-message handlers (``consumer.<name>.between_handlers``)."""
    run = _run.get()
    span = run.spans.get(event.message_id) if run is not None else None
    if run is not None:
        run.turns += 1
        if run.turns > 1:
            fault_point(f"consumer.{run.consumer}.between_handlers")
    with handling(event), current(span) if span is not None else nullcontext():
        yield
