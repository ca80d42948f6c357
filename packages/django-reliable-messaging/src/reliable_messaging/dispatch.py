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
idempotency (the gateway's keys, the state guards) makes safe. The failed member itself is not
run again in that second attempt when its failure says "later" (a ``TransientError`` such as a
gateway timeout, or a lock or statement timeout): running it at once would only repeat the wait,
a whole gateway timeout for a hung gateway, holding the batch's locks meanwhile; it goes to the
retry path with that first failure. A consumer with a bulk handler (the event log) writes its
share with one insert.

Every batch takes its locks in one order, by correlation id (the saga's id, which the handlers
lock rows by) and then by arrival, so that two batches meeting on the same sagas do not wait
for each other in a circle. Rows locked by other keys (a catalogue's products, say) can still
deadlock: PostgreSQL then fails one statement of one batch (40P01); in the savepoint attempt
that rolls back the loser's savepoint, releasing its locks, and the loser is decided again
alone, in a transaction of its own, after the batch has committed. Nothing is lost or done
twice either way.

A database connection lost under a member (its backend terminated, its socket broken, the
gateway's alias too) is no fault of the message: the connections are replaced and the message
decided again, at once, without spending an attempt of its retry budget.
"""

import enum
import logging
import traceback as tb
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from django.db import DatabaseError, InterfaceError, InternalError, OperationalError, connection, transaction
from psycopg import pq

from reliable_messaging import contracts, registry
from reliable_messaging.db_errors import sqlstate_of
from reliable_messaging.envelope import IncomingEvent, InvalidMessage, parse_incoming
from reliable_messaging.faults import fault_point
from reliable_messaging.health import database_reachable
from reliable_messaging.inbox import inbox_claim, inbox_claim_in_savepoint, inbox_claim_many, inbox_hashes
from reliable_messaging.lifecycle import connection_lost, reconnect_databases
from reliable_messaging.outbox import collecting, handling, write_collected
from reliable_messaging.producers import UNAUTHENTICATED, producer_refusal
from reliable_messaging.telemetry import current

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
# A wait bounded by the session's limits ran out (reliable_messaging.session_timeouts): a holder is stuck.
LOCK_NOT_AVAILABLE, QUERY_CANCELED = "55P03", "57014"


@dataclass(frozen=True)
class Delivery:
    """One message as it arrived, for ``decide_batch``."""

    consumer: str
    body: bytes
    properties: dict
    headers: dict
    routing_key: str
    # The message's CONSUMER span (``telemetry.consumer_span``): its handler runs inside it.
    span: Any = None


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


class Refused(Exception):
    """A message that can never be handled, with the decision about it (a dead letter)."""

    def __init__(self, decision: Decision):
        super().__init__(decision.reason)
        self.decision = decision


class Prepared(NamedTuple):
    event: IncomingEvent
    spec: registry.HandlerSpec


def _prepare(consumer: str, body: bytes, properties: dict, headers: dict, routing_key: str) -> Prepared:
    """The event and its handler; ``Refused`` for a message that can never be handled."""
    try:
        event = parse_incoming(body, properties, headers, routing_key)
    except InvalidMessage as exc:
        raise Refused(Decision(Outcome.DEAD_LETTER, reason=exc.reason, error=exc.detail)) from None
    if refusal := producer_refusal(event.event_type, properties.get("user_id")):
        raise Refused(Decision(Outcome.DEAD_LETTER, event, UNAUTHENTICATED, refusal))
    spec = registry.handler_for(consumer, event.event_type)
    if spec is None:
        raise Refused(
            Decision(Outcome.DEAD_LETTER, event, "unknown_event_type", f"{consumer} does not handle {event.event_type}")
        )
    if spec.schema_versions and event.schema_version not in spec.schema_versions:
        raise Refused(Decision(Outcome.DEAD_LETTER, event, "unsupported_schema_version", _unsupported(spec, event)))
    if spec.reading is not None:
        return _read(spec, event)
    return Prepared(event, spec)


def _unsupported(spec, event: IncomingEvent) -> str:
    newest = max(spec.schema_versions)
    if event.schema_version > newest:
        return (
            f"{event.event_type} v{event.schema_version} is newer than {spec.consumer} reads (v1..v{newest}): "
            f"upgrade this deployment, then replay this dead letter (docs/evolving-events.md)"
        )
    return f"{event.event_type} has no version {event.schema_version}: {spec.consumer} reads v1..v{newest}"


def _read(spec, event: IncomingEvent) -> Prepared:
    """The message checked against its schema and brought to the newest version its reader knows
    (what the handler sees); ``Refused`` with the dead letter that says why not."""
    if error := contracts.validation_error(event.event_type, event.schema_version, event.payload):
        raise Refused(Decision(Outcome.DEAD_LETTER, event, "invalid_payload", error))
    if event.schema_version == spec.reading.newest:
        return Prepared(event, spec)
    try:
        payload = spec.reading.upcast(event.schema_version, event.payload)
    except Exception as exc:  # noqa: BLE001 - an upcaster that cannot read a valid payload is a bug to fix, then replay
        raise Refused(_failure(Outcome.DEAD_LETTER, "upcast_failed", exc, event)) from None
    upcast = replace(event, payload=payload, schema_version=spec.reading.newest)
    if error := contracts.validation_error(upcast.event_type, upcast.schema_version, upcast.payload):
        raise Refused(
            Decision(Outcome.DEAD_LETTER, event, "upcast_failed", f"the upcast payload is not valid: {error}")
        )
    return Prepared(upcast, spec)


def _run_handler(spec, event: IncomingEvent, span) -> None:
    # Inside the message's span: what the handler publishes (and its queries) are its children.
    with handling(event), current(span) if span is not None else nullcontext():
        spec.handler(event)


def decide(
    consumer: str, *, body: bytes, properties: dict, headers: dict, routing_key: str, span: Any = None
) -> Decision:
    """One delivery in a transaction of its own (its handler inside ``span`` when given).

    A database connection lost meanwhile (a terminated backend, a broken socket, on any alias)
    is no fault of the message: it is decided again at once on new connections, and spends no
    attempt of its retry budget unless that fails too.
    """
    try:
        event, spec = _prepare(consumer, body, properties, headers, routing_key)
    except Refused as refused:
        return refused.decision
    try:
        return _decide_once(consumer, event, spec, span)
    except (OperationalError, InterfaceError, InternalError) as exc:  # InternalError: read-only, a failover
        if not connection_lost(exc):
            return _database_failure(exc, event)
        reconnect_databases()
        if not database_reachable():
            return _failure(Outcome.DATABASE_DOWN, "database_unavailable", exc, event)
        logger.info("database connection lost: decided again at once", extra={"message_id": event.message_id})
    try:
        return _decide_once(consumer, event, spec, span)
    except (OperationalError, InterfaceError, InternalError) as exc:
        return _database_failure(exc, event)


def _decide_once(consumer: str, event: IncomingEvent, spec, span) -> Decision:
    """The decision; the database's own errors are raised, for the caller to tell their kind."""
    try:
        with transaction.atomic():
            if not inbox_claim(consumer=consumer, event=event):
                return _duplicate_or_reused(consumer, event, _stored_hash(consumer, event))
            _run_handler(spec, event, span)
            _ensure_committable()
            fault_point(f"consumer.{consumer}.before_commit")
    except InvalidPayload as exc:
        return _failure(Outcome.DEAD_LETTER, "invalid_payload", exc, event)
    except (OperationalError, InterfaceError):
        raise
    except InternalError as exc:
        if connection_lost(exc):  # a standby refused the write (a failover): decided again on the primary
            raise
        return _failure(Outcome.RETRY, "handler_error", exc, event)
    except Exception as exc:  # noqa: BLE001 - any handler failure is retried, then dead-lettered
        return _failure(Outcome.RETRY, "handler_error", exc, event)
    return Decision(Outcome.HANDLED, event)


def _stored_hash(consumer: str, event: IncomingEvent) -> str:
    return inbox_hashes(consumer=consumer, message_ids=[event.message_id]).get(event.message_id, "")


def _duplicate_or_reused(consumer: str, event: IncomingEvent, handled_with: str) -> Decision:
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


def _database_failure(exc: BaseException, event: IncomingEvent) -> Decision:
    """An outage when the database does not answer; else the handler's failure, to retry later."""
    if not database_reachable():
        return _failure(Outcome.DATABASE_DOWN, "database_unavailable", exc, event)
    return _failure(Outcome.RETRY, "handler_error", exc, event)


def decide_batch(deliveries: list[Delivery]) -> list[Decision]:
    """Each delivery's decision, in the order given; one transaction for them all (see above)."""
    if len(deliveries) == 1:  # the latency of a lone message stays as it was
        return [_decide_alone(deliveries[0])]
    decisions: list[Decision | None] = [None] * len(deliveries)
    ready = []
    for i, d in enumerate(deliveries):
        try:
            ready.append((i, *_prepare(d.consumer, d.body, d.properties, d.headers, d.routing_key)))
        except Refused as refused:
            decisions[i] = refused.decision
    # One lock order for every batch: the saga's id, then arrival.
    ready.sort(key=lambda item: (item[1].correlation_id, item[0]))
    try:
        handled = _decide_optimistically(deliveries, ready)
        if isinstance(handled, _MemberFailed):  # every member again, each in a savepoint of its own
            failed = handled
            if connection_lost(failed.exc):
                reconnect_databases()  # or every member would fail on the same dead connection
            handled, alone = _decide_with_savepoints(deliveries, ready, known=_known_failure(failed))
        else:
            alone = []
    except (DatabaseError, BatchBroken) as exc:
        # Nothing of the batch was committed. (Not only outages: a value the database refuses,
        # a NUL in a message id say, fails one member's insert and with it the batch's.)
        if not database_reachable():
            return [_failure(Outcome.DATABASE_DOWN, "database_unavailable", exc, None) for _ in deliveries]
        handled, alone = {}, [i for i, _, _ in ready]  # the commit itself failed: each one alone
    for i, decision in handled.items():
        decisions[i] = decision
    for i in alone:
        decisions[i] = _decide_alone(deliveries[i])
    return decisions


class _MemberFailed(Exception):
    """The optimistic pass is abandoned: it rolls back whole. ``index``: the member that failed."""

    def __init__(self, exc: BaseException, index: int | None = None, event: IncomingEvent | None = None) -> None:
        super().__init__(exc)
        self.exc, self.index, self.event = exc, index, event


def _retry_later(exc: BaseException) -> bool:
    """A failure that running the member again at once would only repeat (after the same wait)."""
    if isinstance(exc, TransientError):
        return True
    return isinstance(exc, OperationalError) and sqlstate_of(exc) in (LOCK_NOT_AVAILABLE, QUERY_CANCELED)


def _known_failure(failed: "_MemberFailed") -> dict[int, Decision]:
    """The decision the failed member's first attempt already gives, when it is one to retry later."""
    if failed.index is None or not _retry_later(failed.exc):
        return {}
    return {failed.index: _failure(Outcome.RETRY, "handler_error", failed.exc, failed.event)}


def _decide_optimistically(deliveries: list[Delivery], ready: list) -> "dict[int, Decision] | _MemberFailed":
    """The common case, no member failing: every inbox row of a consumer in one insert, the
    handlers, every outbox row they publish in one insert, one commit; no savepoint at all.
    The failure (and nothing committed) as soon as a member fails or loses a deadlock."""
    decisions: dict[int, Decision] = {}
    try:
        with transaction.atomic():
            new: dict[str, set[str]] = {}
            # The content each message id is claimed with: this batch's first member with the id,
            # or the inbox row of an earlier handling.
            claimed_with: dict[tuple[str, str], str] = {}
            for consumer in sorted({deliveries[i].consumer for i, _, _ in ready}):
                events: dict[str, IncomingEvent] = {}
                for i, e, _ in ready:
                    if deliveries[i].consumer == consumer:
                        events.setdefault(e.message_id, e)
                new[consumer] = inbox_claim_many(consumer=consumer, events=list(events.values()))
                seen = inbox_hashes(consumer=consumer, message_ids=[m for m in events if m not in new[consumer]])
                for message_id, event in events.items():
                    claimed_with[consumer, message_id] = seen.get(message_id, event.content_hash)
            bulk: dict[str, list] = {}
            with collecting() as published:
                for n, (i, event, spec) in enumerate(ready):
                    consumer = deliveries[i].consumer
                    if event.message_id not in new[consumer]:  # handled before, or twice in this batch
                        decisions[i] = _duplicate_or_reused(consumer, event, claimed_with[consumer, event.message_id])
                        continue
                    new[consumer].discard(event.message_id)
                    decisions[i] = Decision(Outcome.HANDLED, event)
                    if spec.bulk_handler is not None:
                        bulk.setdefault(consumer, []).append((spec, event))
                        continue
                    if n:
                        fault_point(f"consumer.{consumer}.between_handlers")
                    try:
                        _run_handler(spec, event, deliveries[i].span)
                    except Exception as exc:  # noqa: BLE001 - decided again below, in savepoints
                        raise _MemberFailed(exc, i, event) from exc
                for members in bulk.values():
                    try:
                        members[0][0].bulk_handler([event for _, event in members])
                    except Exception as exc:  # noqa: BLE001 - decided again below, in savepoints
                        raise _MemberFailed(exc) from exc
            write_collected(published)
            _before_batch_commit(deliveries)
    except _MemberFailed as failed:
        logger.info("a member of the batch failed: the batch again, each member in its savepoint: %s", failed)
        return failed
    return decisions


def _decide_with_savepoints(
    deliveries: list[Delivery], ready: list, *, known: dict[int, Decision] | None = None
) -> tuple[dict[int, Decision], list[int]]:
    """Every member in a savepoint of its own, so that a failing one rolls back alone, its inbox
    claim with it; a deadlock's loser is left to be decided alone afterwards. A member with a
    ``known`` decision (its failure in the first attempt) is not run again. The decisions, and
    the members left to decide alone."""
    decisions: dict[int, Decision] = dict(known or {})
    alone: list[int] = []
    claimed: dict[tuple[str, str], str] = {}  # (consumer, message id) -> the content it was handled with
    savepoints = MemberSavepoints()
    with transaction.atomic(), collecting() as published:
        for n, (i, event, spec) in enumerate(ready):
            consumer = deliveries[i].consumer
            if i in decisions:  # failed in the first attempt, to be retried later
                continue
            if (consumer, event.message_id) in claimed:  # the same message twice in one batch
                decisions[i] = _duplicate_or_reused(consumer, event, claimed[consumer, event.message_id])
                continue
            if n:
                fault_point(f"consumer.{consumer}.between_handlers")
            mark = len(published)
            decided = _decide_in_savepoint(consumer, event, spec, savepoints, deliveries[i].span)
            if decided is None or decided.outcome is not Outcome.HANDLED:
                del published[mark:]  # rolled back with its savepoint
            if decided is None:
                alone.append(i)
            else:
                decisions[i] = decided
                claimed[consumer, event.message_id] = event.content_hash
        write_collected(published)
        _before_batch_commit(deliveries)
    return decisions, alone


def _ensure_committable() -> None:
    """Refuse to go on to the COMMIT of a transaction that can no longer commit (a handler
    swallowed a database error): PostgreSQL would answer it with a rollback, and the messages
    would be acked for nothing."""
    if transaction.get_rollback() or (
        connection.vendor == "postgresql"
        and connection.connection.info.transaction_status != pq.TransactionStatus.INTRANS
    ):
        raise BatchBroken("the transaction can no longer commit")


def _before_batch_commit(deliveries: list[Delivery]) -> None:
    _ensure_committable()
    for consumer in sorted({d.consumer for d in deliveries}):
        fault_point(f"consumer.{consumer}.before_commit")  # as for a lone message
        fault_point(f"consumer.{consumer}.before_batch_commit")  # only ever in a batch


def _decide_alone(d: Delivery) -> Decision:
    return decide(
        d.consumer, body=d.body, properties=d.properties, headers=d.headers, routing_key=d.routing_key, span=d.span
    )


class BatchBroken(Exception):
    """A member's failure could not be contained in its savepoint: the batch must roll back whole."""


class MemberSavepoints:
    """The savepoints of a batch's members.

    On PostgreSQL a member's savepoint is opened in the same round trip as its inbox claim, and
    released in the next member's (``inbox_claim_in_savepoint``): two round trips fewer per
    message than Django's ``atomic()``, which would otherwise cost what one commit per message
    did. Elsewhere (SQLite runs one statement per execute) ``atomic()`` does it.
    """

    def __init__(self) -> None:
        self.count = 0
        self.unreleased: str | None = None

    @contextmanager
    def member(self, consumer: str, event: IncomingEvent) -> Iterator[bool]:
        """The member's claim (True: not handled before) in its savepoint; its work runs inside.
        An exception rolls the savepoint back, the claim with it, and goes on up."""
        if connection.vendor != "postgresql":
            with transaction.atomic():
                yield inbox_claim(consumer=consumer, event=event)
            return
        self.count += 1
        name = f"batch_member_{self.count}"
        release, self.unreleased = self.unreleased, None
        callbacks = len(connection.run_on_commit)
        try:
            claimed = inbox_claim_in_savepoint(consumer=consumer, event=event, savepoint=name, release=release)
            yield claimed
        except BaseException as exc:
            # The handler's own atomic blocks asked to roll the whole transaction back; this
            # member's savepoint is enough (what Django's atomic() does for a savepoint),
            # and so are the on_commit callbacks it registered (Django drops those only for
            # savepoints it made itself).
            del connection.run_on_commit[callbacks:]
            transaction.set_rollback(False)
            try:
                transaction.savepoint_rollback(name)
            except DatabaseError:
                # Not even back to the savepoint: the transaction is aborted, and PostgreSQL would
                # answer the batch's COMMIT with a silent rollback. Nothing of the batch stands.
                transaction.set_rollback(True)
                raise BatchBroken(str(exc)) from exc
            raise
        finally:
            self.unreleased = name


def _decide_in_savepoint(
    consumer: str, event: IncomingEvent, spec, savepoints: MemberSavepoints, span
) -> Decision | None:
    """A batch member in its savepoint; None when it lost a deadlock or a connection and must be
    decided alone."""
    try:
        with savepoints.member(consumer, event) as claimed:
            if not claimed:
                return _duplicate_or_reused(consumer, event, _stored_hash(consumer, event))
            _run_handler(spec, event, span)
    except BatchBroken:
        raise
    except InvalidPayload as exc:
        return _failure(Outcome.DEAD_LETTER, "invalid_payload", exc, event)
    except (OperationalError, InterfaceError) as exc:
        if sqlstate_of(exc) == DEADLOCK_DETECTED:
            logger.info("deadlock inside a batch: decided again alone", extra={"message_id": event.message_id})
            return None
        if not connection.is_usable():
            raise  # the whole batch is gone with the connection
        if connection_lost(exc):  # another alias's (the gateway's): decided alone, on a new one
            logger.info(
                "database connection lost inside a batch: decided again alone", extra={"message_id": event.message_id}
            )
            return None
        return _failure(Outcome.RETRY, "handler_error", exc, event)
    except InternalError as exc:
        if connection_lost(exc):  # read-only: the whole batch is on a standby, decided again on the primary
            raise
        return _failure(Outcome.RETRY, "handler_error", exc, event)
    except Exception as exc:  # noqa: BLE001 - any handler failure is retried, then dead-lettered
        return _failure(Outcome.RETRY, "handler_error", exc, event)
    return Decision(Outcome.HANDLED, event)
