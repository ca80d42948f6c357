"""What a decision about a delivery is, and the steps every decision takes, alone or in a batch.

The types (``Delivery`` in, ``Decision`` out, the ``Outcome``), the failures a handler raises
(``InvalidPayload``, ``TransientError``), and the steps ``reliable_messaging._dispatch`` (one
message) and ``reliable_messaging._batch_decisions`` (a batch's passes) share: running a handler,
telling a duplicate from a reused message id, refusing to commit a transaction that cannot.
"""

import enum
import traceback as tb
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, cast

from django.db import DatabaseError, connection, transaction
from opentelemetry.trace import Span
from psycopg import pq

from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._inbox import inbox_hashes
from reliable_messaging._outbox import handling
from reliable_messaging._registry import HandlerSpec
from reliable_messaging._runs import RunHandler, run_handler_on
from reliable_messaging._telemetry import current


class InvalidPayload(Exception):
    """A handler found the payload unusable: missing or invalid fields. Never retried."""


class TransientError(Exception):
    """A failure that may pass (a remote service timing out, say): the message is retried later."""


# The reason of a dead letter whose exception its handler's policy never retries (``never_retry``).
NEVER_RETRY = "never_retry"


class Outcome(enum.Enum):
    HANDLED = "handled"
    DUPLICATE = "duplicate"
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"
    DATABASE_DOWN = "database_down"


@dataclass(frozen=True)
class Delivery:
    """One message as it arrived, for ``decide_batch``."""

    consumer: str
    body: bytes
    properties: dict[str, Any]
    headers: dict[str, Any]
    routing_key: str
    # The message's CONSUMER span (``telemetry.consumer_span``): its handler runs inside it.
    span: Span | None = None


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    event: IncomingEvent | None = None
    reason: str = ""
    error: str = ""
    traceback: str = ""
    # A failure that may pass (a TransientError, a database error): what a handler's breaker counts.
    transient: bool = False
    # Refused before any handler ran (``_delivery_checks``): a dead letter that a flood of its
    # reason may leave counted only (``_dead_letters``).
    refused: bool = False


def failure(outcome: Outcome, reason: str, exc: BaseException, event: IncomingEvent | None) -> Decision:
    return Decision(
        outcome,
        event=event,
        reason=reason,
        error=f"{type(exc).__name__}: {exc}"[:4000],
        traceback="".join(tb.format_exception(exc, limit=8))[-8000:],
        transient=isinstance(exc, TransientError | DatabaseError),
    )


def handler_failed(spec: HandlerSpec | None, exc: BaseException, event: IncomingEvent | None) -> Decision:
    """A handler's failure: a dead letter at once when its policy never retries the exception's
    class, else a retry (whose budget and wait the consumer takes from the same policy)."""
    if spec is not None and isinstance(exc, spec.never_retry):
        return failure(Outcome.DEAD_LETTER, NEVER_RETRY, exc, event)
    return failure(Outcome.RETRY, "handler_error", exc, event)


class BatchBroken(Exception):
    """A member's failure could not be contained in its savepoint: the batch must roll back whole."""


def run_handler(spec: HandlerSpec, event: IncomingEvent, span: Span | None) -> None:
    """The message's handler on it alone: a run handler gets a run of one (reliable_messaging._runs)."""
    if spec.takes_runs:
        run_handler_on(cast(RunHandler, spec.handler), spec.consumer, [(event, span)])
        return
    # Inside the message's span: what the handler publishes (and its queries) are its children.
    with handling(event), current(span) if span is not None else nullcontext():
        cast(Callable[[IncomingEvent], object], spec.handler)(event)


def stored_hash(consumer: str, event: IncomingEvent) -> str:
    return inbox_hashes(consumer=consumer, message_ids=[event.message_id]).get(event.message_id, "")


def duplicate_or_reused(consumer: str, event: IncomingEvent, handled_with: str) -> Decision:
    """A message id handled before: a duplicate (acked without effect) when its content is what
    was handled, else a reused id (a dead letter), never a silent drop. An inbox row of a release
    before content hashes ("") can only say duplicate."""
    if not handled_with or not event.content_hash or handled_with == event.content_hash:
        return Decision(Outcome.DUPLICATE, event)
    return Decision(
        Outcome.DEAD_LETTER,
        event,
        "message_id_reused",
        f"{consumer} handled message {event.message_id} with content sha256 {handled_with}; "
        f"this delivery's content is sha256 {event.content_hash}",
    )


def ensure_committable() -> None:
    """Refuse to go on to the COMMIT of a transaction that can no longer commit (a handler
    swallowed a database error): PostgreSQL would answer it with a rollback, and the messages
    would be acked for nothing."""
    if transaction.get_rollback() or (
        connection.vendor == "postgresql"
        and connection.connection.info.transaction_status != pq.TransactionStatus.INTRANS
    ):
        raise BatchBroken("the transaction can no longer commit")
