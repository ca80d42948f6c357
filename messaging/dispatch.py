"""What to do with one delivery: decide, in one transaction, and report the outcome.

The consumer loop turns the outcome into an ack, a retry or a dead letter; this module
never touches the broker.
"""

import enum
import logging
import traceback as tb
from contextlib import nullcontext
from dataclasses import dataclass

from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction

from messaging import registry
from messaging.envelope import IncomingEvent, InvalidMessage, parse_incoming
from messaging.faults import fault_point
from messaging.inbox import inbox_claim
from messaging.outbox import handling, tracing
from messaging.tracecontext import child_span

logger = logging.getLogger(__name__)


class InvalidPayload(Exception):
    """A handler found the payload unusable: missing or invalid fields. Never retried."""


class TransientError(Exception):
    """A failure that may pass (a gateway timeout, say): the message is retried later."""


class Outcome(enum.Enum):
    HANDLED = "handled"
    DUPLICATE = "duplicate"
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"
    DATABASE_DOWN = "database_down"


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    event: IncomingEvent | None = None
    reason: str = ""
    error: str = ""
    traceback: str = ""


def _failure(outcome: Outcome, reason: str, exc: BaseException, event: IncomingEvent | None) -> Decision:
    return Decision(
        outcome,
        event=event,
        reason=reason,
        error=f"{type(exc).__name__}: {exc}"[:4000],
        traceback="".join(tb.format_exception(exc, limit=8))[-8000:],
    )


def database_reachable() -> bool:
    try:
        connection.close_if_unusable_or_obsolete()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except DatabaseError:
        connection.close()
        return False


def decide(consumer: str, *, body: bytes, properties: dict, headers: dict, routing_key: str) -> Decision:
    try:
        event = parse_incoming(body, properties, headers, routing_key)
    except InvalidMessage as exc:
        return Decision(Outcome.DEAD_LETTER, reason=exc.reason, error=exc.detail)

    spec = registry.handler_for(consumer, event.event_type)
    if spec is None:
        return Decision(
            Outcome.DEAD_LETTER, event, "unknown_event_type", f"{consumer} does not handle {event.event_type}"
        )
    if spec.schema_versions and event.schema_version not in spec.schema_versions:
        return Decision(
            Outcome.DEAD_LETTER,
            event,
            "unsupported_schema_version",
            f"{consumer} handles {event.event_type} versions {list(spec.schema_versions)}, not {event.schema_version}",
        )

    try:
        with transaction.atomic():
            if not inbox_claim(consumer=consumer, event=event):
                return Decision(Outcome.DUPLICATE, event)
            # The handler is a span of its own in the message's trace.
            with handling(event), tracing(child_span(event.traceparent)) if event.traceparent else nullcontext():
                spec.handler(event)
            fault_point(f"consumer.{consumer}.before_commit")
    except InvalidPayload as exc:
        return _failure(Outcome.DEAD_LETTER, "invalid_payload", exc, event)
    except (OperationalError, InterfaceError) as exc:
        if not database_reachable():
            return _failure(Outcome.DATABASE_DOWN, "database_unavailable", exc, event)
        return _failure(Outcome.RETRY, "handler_error", exc, event)
    except Exception as exc:  # noqa: BLE001 - any handler failure is retried, then dead-lettered
        return _failure(Outcome.RETRY, "handler_error", exc, event)
    return Decision(Outcome.HANDLED, event)
