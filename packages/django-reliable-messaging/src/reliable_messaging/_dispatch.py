"""What to do with deliveries: decide, in one transaction, and report each one's outcome.

The consumer loop turns each outcome into an ack, a retry or a dead letter; this module never
touches the broker.

A batch (``decide_batch``) is one transaction: one commit for many deliveries instead of one
each. It is tried optimistically first: one insert claims every member's inbox row (a
consumer's share of the batch at once), the handlers run, one insert writes every event they
published, one commit. If a member fails, that attempt rolls back whole and the batch runs
again with every member in a savepoint of its own, so the failing one rolls back alone, its
inbox claim with it (its retry must not look like a duplicate) and the others commit; the
handlers that ran in the abandoned attempt run again, as after a crash, which their
idempotency (their state guards, a remote service's idempotency keys) makes safe. The failed member itself is not
run again in that second attempt when its failure says "later" (a ``TransientError`` such as a
remote service's timeout, or a lock or statement timeout): running it at once would only repeat
the wait, a whole timeout for a hung service, holding the batch's locks meanwhile; it goes to the
retry path with that first failure.

So a batch is decided one way, plus its fallback: its members in runs, in one transaction (a
run handler, ``reliable_messaging._runs``, takes a consumer's consecutive members in one call:
the event log writes its share with one insert); failing that, each member on its own, as a
run of one (in its savepoint, or in a transaction of its own: a lone delivery, a deadlock's
loser), which every handler's shape takes as it takes a run.

Every batch takes its locks in one order, by correlation id (the process's id, which handlers
usually lock rows by) and then by arrival, so that two batches meeting on the same processes do not wait
for each other in a circle. Rows locked by other keys (shared reference rows, say) can still
deadlock: PostgreSQL then fails one statement of one batch (40P01); in the savepoint attempt
that rolls back the loser's savepoint, releasing its locks, and the loser is decided again
alone, in a transaction of its own, after the batch has committed. Nothing is lost or done
twice either way.

A database connection lost under a member (its backend terminated, its socket broken, on
any alias) is no fault of the message: the connections are replaced and the message
decided again, at once, without spending an attempt of its retry budget.

The parts: ``reliable_messaging._decisions`` (what a delivery and a decision are, and the steps
every decision takes), ``reliable_messaging._delivery_checks`` (what a message must pass before
its handler runs) and ``reliable_messaging._batch_decisions`` (a batch's two passes and its
members' savepoints); here, a lone message's transaction and the batch's course between them.
"""

import logging
from typing import Any

from django.db import DatabaseError, InterfaceError, InternalError, OperationalError, transaction
from opentelemetry.trace import Span

from reliable_messaging._batch_decisions import (
    MemberFailed,
    MemberSavepoints,
    decide_optimistically,
    decide_with_savepoints,
    known_failure,
)
from reliable_messaging._db_errors import DEADLOCK_DETECTED, LOCK_NOT_AVAILABLE, QUERY_CANCELED
from reliable_messaging._decisions import (
    BatchBroken,
    Decision,
    Delivery,
    InvalidPayload,
    Outcome,
    TransientError,
    duplicate_or_reused,
    ensure_committable,
    failure,
    handler_failed,
    run_handler,
    stored_hash,
)
from reliable_messaging._delivery_checks import Prepared, Refused, checked, readable, subject_keys
from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._faults import fault_point
from reliable_messaging._health import database_reachable
from reliable_messaging._inbox import inbox_claim
from reliable_messaging._lifecycle import connection_lost, reconnect_databases
from reliable_messaging._registry import HandlerSpec

# What other modules import from here (their definitions moved out with their parts, above).
__all__ = [
    "DEADLOCK_DETECTED",
    "LOCK_NOT_AVAILABLE",
    "QUERY_CANCELED",
    "BatchBroken",
    "Decision",
    "Delivery",
    "InvalidPayload",
    "MemberSavepoints",
    "Outcome",
    "Prepared",
    "Refused",
    "TransientError",
    "decide",
    "decide_batch",
]

logger = logging.getLogger("reliable_messaging.dispatch")


def decide(
    consumer: str,
    *,
    body: bytes,
    properties: dict[str, Any],
    headers: dict[str, Any],
    routing_key: str,
    span: Span | None = None,
) -> Decision:
    """One delivery in a transaction of its own (its handler inside ``span`` when given).

    A database connection lost meanwhile (a terminated backend, a broken socket, on any alias)
    is no fault of the message: it is decided again at once on new connections, and spends no
    attempt of its retry budget unless that fails too.
    """
    try:
        prepared = checked(consumer, body, properties, headers, routing_key)
    except Refused as refused:
        return refused.decision
    event, spec = prepared
    try:
        return _decide_once(prepared, span)
    except (OperationalError, InterfaceError, InternalError) as exc:  # InternalError: read-only, a failover
        if not connection_lost(exc):
            return _database_failure(exc, event, spec)
        reconnect_databases()
        if not database_reachable():
            return failure(Outcome.DATABASE_DOWN, "database_unavailable", exc, event)
        logger.info("database connection lost: decided again at once", extra={"message_id": event.message_id})
    try:
        return _decide_once(prepared, span)
    except (OperationalError, InterfaceError, InternalError) as exc:
        return _database_failure(exc, event, spec)


def _decide_once(prepared: Prepared, span: Span | None) -> Decision:
    """The decision, the payload read in its transaction; the database's own errors are raised,
    for the caller to tell their kind."""
    event, spec = prepared
    consumer = spec.consumer
    try:
        with transaction.atomic():
            event, spec = readable(prepared, subject_keys([prepared]))
            if not inbox_claim(consumer=consumer, event=event):
                return duplicate_or_reused(consumer, event, stored_hash(consumer, event))
            run_handler(spec, event, span)
            ensure_committable()
            fault_point(f"consumer.{consumer}.before_commit")
    except Refused as refused:
        return refused.decision
    except InvalidPayload as exc:
        return failure(Outcome.DEAD_LETTER, "invalid_payload", exc, event)
    except (OperationalError, InterfaceError):
        raise
    except InternalError as exc:
        if connection_lost(exc):  # a standby refused the write (a failover): decided again on the primary
            raise
        return handler_failed(spec, exc, event)
    except Exception as exc:  # noqa: BLE001 - any handler failure is retried (its policy's), then dead-lettered
        return handler_failed(spec, exc, event)
    return Decision(Outcome.HANDLED, event)


def _database_failure(exc: BaseException, event: IncomingEvent, spec: HandlerSpec) -> Decision:
    """An outage when the database does not answer; else the handler's failure, to retry later."""
    if not database_reachable():
        return failure(Outcome.DATABASE_DOWN, "database_unavailable", exc, event)
    return handler_failed(spec, exc, event)


def decide_batch(deliveries: list[Delivery]) -> list[Decision]:
    """Each delivery's decision, in the order given; one transaction for them all (see above)."""
    if len(deliveries) == 1:  # the latency of a lone message stays as it was
        return [_decide_alone(deliveries[0])]
    decisions: list[Decision | None] = [None] * len(deliveries)
    ready = []
    for i, d in enumerate(deliveries):
        try:
            ready.append((i, *checked(d.consumer, d.body, d.properties, d.headers, d.routing_key)))
        except Refused as refused:
            decisions[i] = refused.decision
    if not ready:  # every one refused (a flood of bogus messages, say): no transaction at all
        return [d for d in decisions if d is not None]
    # One lock order for every batch: the correlation id, then arrival.
    ready.sort(key=lambda item: (item[1].correlation_id, item[0]))
    try:
        handled = decide_optimistically(deliveries, ready)
        if isinstance(handled, MemberFailed):  # every member again, each in a savepoint of its own
            failed = handled
            if connection_lost(failed.exc):
                reconnect_databases()  # or every member would fail on the same dead connection
            handled, alone = decide_with_savepoints(deliveries, ready, known=known_failure(failed))
        else:
            alone = []
    except (DatabaseError, BatchBroken) as exc:
        # Nothing of the batch was committed. (Not only outages: a value the database refuses,
        # a NUL in a message id say, fails one member's insert and with it the batch's.)
        if not database_reachable():
            return [failure(Outcome.DATABASE_DOWN, "database_unavailable", exc, None) for _ in deliveries]
        handled, alone = {}, [i for i, _, _ in ready]  # the commit itself failed: each one alone
    for i, decision in handled.items():
        decisions[i] = decision
    for i in alone:
        decisions[i] = _decide_alone(deliveries[i])
    # Each one is decided by now: refused, in the batch, or alone.
    if len(complete := [d for d in decisions if d is not None]) != len(deliveries):
        raise RuntimeError("a delivery of the batch was left without a decision")
    return complete


def _decide_alone(d: Delivery) -> Decision:
    return decide(
        d.consumer, body=d.body, properties=d.properties, headers=d.headers, routing_key=d.routing_key, span=d.span
    )
