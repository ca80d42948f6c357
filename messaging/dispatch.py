"""What to do with deliveries: decide, in one transaction, and report each one's outcome.

The consumer loop turns each outcome into an ack, a retry or a dead letter; this module never
touches the broker.

A batch (``decide_batch``) is one transaction: one commit for many deliveries instead of one
each. Inside it every message's inbox claim and handler run in a savepoint of their own, so a
failing message rolls back alone, its claim with it (its retry must not look like a duplicate).
Every batch takes its locks in one order, by correlation id (the saga's id, which the handlers
lock rows by) and then by arrival, so that two batches meeting on the same orders do not wait
for each other in a circle. Rows locked by other keys (inventory's products) can still
deadlock: PostgreSQL then fails one statement of one batch (40P01), which rolls back that
message's savepoint, releasing its locks; the message is decided again alone, in a transaction
of its own, after the batch has committed. Nothing is lost or done twice either way.
"""

import enum
import logging
import traceback as tb
from contextlib import nullcontext
from dataclasses import dataclass

from django.db import DatabaseError, InterfaceError, OperationalError, connection, transaction

from kernel.exceptions import sqlstate_of
from messaging import registry
from messaging.envelope import IncomingEvent, InvalidMessage, parse_incoming
from messaging.faults import fault_point
from messaging.inbox import inbox_claim, inbox_claim_many
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


DEADLOCK_DETECTED = "40P01"


@dataclass(frozen=True)
class Delivery:
    """One message as it arrived, for ``decide_batch``."""

    consumer: str
    body: bytes
    properties: dict
    headers: dict
    routing_key: str


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


def _prepare(consumer: str, body: bytes, properties: dict, headers: dict, routing_key: str):
    """The event and its handler, or the ``Decision`` for a message that can never be handled."""
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
    return event, spec


def _run_handler(spec, event: IncomingEvent) -> None:
    # The handler is a span of its own in the message's trace.
    with handling(event), tracing(child_span(event.traceparent)) if event.traceparent else nullcontext():
        spec.handler(event)


def decide(consumer: str, *, body: bytes, properties: dict, headers: dict, routing_key: str) -> Decision:
    """One delivery in a transaction of its own."""
    prepared = _prepare(consumer, body, properties, headers, routing_key)
    if isinstance(prepared, Decision):
        return prepared
    event, spec = prepared
    try:
        with transaction.atomic():
            if not inbox_claim(consumer=consumer, event=event):
                return Decision(Outcome.DUPLICATE, event)
            _run_handler(spec, event)
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


def decide_batch(deliveries: list[Delivery]) -> list[Decision]:
    """Each delivery's decision, in the order given; one transaction for them all (see above)."""
    if len(deliveries) == 1:  # no savepoint needed: the latency of a lone message stays as it was
        return [_decide_alone(deliveries[0])]
    decisions: list[Decision | None] = [None] * len(deliveries)
    ready = []
    for i, d in enumerate(deliveries):
        prepared = _prepare(d.consumer, d.body, d.properties, d.headers, d.routing_key)
        if isinstance(prepared, Decision):
            decisions[i] = prepared
        else:
            ready.append((i, *prepared))
    # A consumer with a bulk handler (the event log) takes its share of the batch in one go.
    groups: dict[str, list] = {}
    for item in ready:
        if item[2].bulk_handler is not None:
            groups.setdefault(deliveries[item[0]].consumer, []).append(item)
    bulk = {consumer: items for consumer, items in groups.items() if len(items) > 1}
    ready = [item for item in ready if not (item[2].bulk_handler and deliveries[item[0]].consumer in bulk)]
    alone: list[int] = []
    try:
        with transaction.atomic():
            claimed: set[tuple[str, str]] = set()
            for consumer, items in bulk.items():
                decided = _decide_bulk_in_savepoint(consumer, items)
                if decided is None:
                    ready += items  # one by one after all, each in a savepoint of its own
                    continue
                for i, decision in decided:
                    decisions[i] = decision
            ready.sort(key=lambda item: (item[1].correlation_id, item[0]))
            for n, (i, event, spec) in enumerate(ready):
                consumer = deliveries[i].consumer
                if (consumer, event.message_id) in claimed:  # the same message twice in one batch
                    decisions[i] = Decision(Outcome.DUPLICATE, event)
                    continue
                if n:
                    fault_point(f"consumer.{consumer}.between_handlers")
                decisions[i] = _decide_in_savepoint(consumer, event, spec)
                if decisions[i] is None:
                    alone.append(i)
                else:
                    claimed.add((consumer, event.message_id))
            for consumer in sorted({d.consumer for d in deliveries}):
                fault_point(f"consumer.{consumer}.before_commit")
    except (OperationalError, InterfaceError) as exc:
        # Nothing of the batch was committed.
        if not database_reachable():
            return [_failure(Outcome.DATABASE_DOWN, "database_unavailable", exc, None) for _ in deliveries]
        # The commit itself failed: what it held (and what it never reached) is decided alone.
        alone = [i for i, d in enumerate(decisions) if d is None or d.outcome in (Outcome.HANDLED, Outcome.DUPLICATE)]
    for i in alone:
        decisions[i] = _decide_alone(deliveries[i])
    return decisions


def _decide_alone(d: Delivery) -> Decision:
    return decide(d.consumer, body=d.body, properties=d.properties, headers=d.headers, routing_key=d.routing_key)


def _decide_in_savepoint(consumer: str, event: IncomingEvent, spec) -> Decision | None:
    """A batch member in its savepoint; None when it lost a deadlock and must be decided alone."""
    try:
        with transaction.atomic():
            if not inbox_claim(consumer=consumer, event=event):
                return Decision(Outcome.DUPLICATE, event)
            _run_handler(spec, event)
    except InvalidPayload as exc:
        return _failure(Outcome.DEAD_LETTER, "invalid_payload", exc, event)
    except (OperationalError, InterfaceError) as exc:
        if sqlstate_of(exc) == DEADLOCK_DETECTED:
            logger.info("deadlock inside a batch: decided again alone", extra={"message_id": event.message_id})
            return None
        if not connection.is_usable():
            raise  # the whole batch is gone with the connection
        return _failure(Outcome.RETRY, "handler_error", exc, event)
    except Exception as exc:  # noqa: BLE001 - any handler failure is retried, then dead-lettered
        return _failure(Outcome.RETRY, "handler_error", exc, event)
    return Decision(Outcome.HANDLED, event)


def _decide_bulk_in_savepoint(consumer: str, items: list) -> list[tuple[int, Decision]] | None:
    """Many messages of one consumer with a bulk handler: one inbox insert, one handler call.
    None when that failed (it is then rolled back): decide them one by one."""
    first: dict[str, tuple] = {}
    for item in items:
        first.setdefault(item[1].message_id, item)
    try:
        with transaction.atomic():
            new = inbox_claim_many(consumer=consumer, events=[event for _, event, _ in first.values()])
            fresh = [event for _, event, _ in first.values() if event.message_id in new]
            if fresh:
                items[0][2].bulk_handler(fresh)
    except (OperationalError, InterfaceError):
        if not connection.is_usable():
            raise  # the whole batch is gone with the connection
        return None
    except Exception as exc:  # noqa: BLE001 - one by one, each message fails or succeeds on its own
        logger.info("bulk handling failed, one by one instead: %s", exc, extra={"consumer": consumer})
        return None
    return [
        (
            i,
            Decision(
                Outcome.HANDLED if first[event.message_id][0] == i and event.message_id in new else Outcome.DUPLICATE,
                event,
            ),
        )
        for i, event, _ in items
    ]
