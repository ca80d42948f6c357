"""The two passes of a batch's transaction (``reliable_messaging._dispatch.decide_batch`` runs them).

First optimistically, with no savepoint at all (``decide_optimistically``); when a member fails,
every member again, each in a savepoint of its own (``decide_with_savepoints``), so that the
failing one rolls back alone, its inbox claim with it. A member that loses a deadlock (or a
connection) is left to be decided alone, after the batch has committed. Each pass first reads its
members' payloads in its transaction, their subject keys with one query (``_readable``).
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

from django.db import DatabaseError, InterfaceError, InternalError, OperationalError, connection, transaction
from opentelemetry.trace import Span

from reliable_messaging._db_errors import DEADLOCK_DETECTED, LOCK_NOT_AVAILABLE, QUERY_CANCELED, sqlstate_of
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
from reliable_messaging._delivery_checks import Prepared, Refused, readable, subject_keys
from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._faults import fault_point
from reliable_messaging._inbox import inbox_claim, inbox_claim_in_savepoint, inbox_claim_many, inbox_hashes
from reliable_messaging._lifecycle import connection_lost
from reliable_messaging._outbox import collecting, write_collected
from reliable_messaging._registry import HandlerSpec
from reliable_messaging._runs import RunHandler, run_handler_on

# A member ready to be decided: its index in the batch, its event and its handler.
Ready = tuple[int, IncomingEvent, HandlerSpec]

# The batch's records keep the name they had before this module was cut out of dispatch.
logger = logging.getLogger("reliable_messaging.dispatch")


class MemberFailed(Exception):
    """The optimistic pass is abandoned: it rolls back whole. ``index``: the member that failed."""

    def __init__(
        self,
        exc: BaseException,
        index: int | None = None,
        event: IncomingEvent | None = None,
        spec: HandlerSpec | None = None,
    ) -> None:
        super().__init__(exc)
        self.exc, self.index, self.event, self.spec = exc, index, event, spec


def _retry_later(exc: BaseException) -> bool:
    """A failure that running the member again at once would only repeat (after the same wait)."""
    if isinstance(exc, TransientError):
        return True
    return isinstance(exc, OperationalError) and sqlstate_of(exc) in (LOCK_NOT_AVAILABLE, QUERY_CANCELED)


def known_failure(failed: MemberFailed) -> dict[int, Decision]:
    """The decision the failed member's first attempt already gives, when it is one to retry later."""
    if failed.index is None or not _retry_later(failed.exc):
        return {}
    return {failed.index: handler_failed(failed.spec, failed.exc, failed.event)}


def decide_optimistically(deliveries: list[Delivery], ready: list[Ready]) -> dict[int, Decision] | MemberFailed:
    """The common case, no member failing: every inbox row of a consumer in one insert, the
    handlers, every outbox row they publish in one insert, one commit; no savepoint at all.
    The failure (and nothing committed) as soon as a member fails or loses a deadlock."""
    decisions: dict[int, Decision] = {}
    try:
        with transaction.atomic():
            ready = _readable(ready, decisions)
            if not ready:  # every one refused: nothing to claim (nor a transaction to commit)
                return decisions
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
            runs = Runs()
            with collecting() as published:
                for n, (i, event, spec) in enumerate(ready):
                    consumer = deliveries[i].consumer
                    if event.message_id not in new[consumer]:  # handled before, or twice in this batch
                        decisions[i] = duplicate_or_reused(consumer, event, claimed_with[consumer, event.message_id])
                        continue
                    new[consumer].discard(event.message_id)
                    decisions[i] = Decision(Outcome.HANDLED, event)
                    if runs.extend(consumer, spec, event, deliveries[i].span, after_others=n > 0):
                        continue
                    if n:
                        fault_point(f"consumer.{consumer}.between_handlers")
                    try:
                        run_handler(spec, event, deliveries[i].span)
                    except Exception as exc:  # noqa: BLE001 - decided again below, in savepoints
                        raise MemberFailed(exc, i, event, spec) from exc
                runs.end_all()
            write_collected(published)
            _before_batch_commit(deliveries)
    except MemberFailed as failed:
        logger.info("a member of the batch failed: the batch again, each member in its savepoint: %s", failed)
        return failed
    return decisions


def decide_with_savepoints(
    deliveries: list[Delivery], ready: list[Ready], *, known: dict[int, Decision] | None = None
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
        for n, (i, event, spec) in enumerate(_readable(ready, decisions)):
            consumer = deliveries[i].consumer
            if i in decisions:  # failed in the first attempt, to be retried later
                continue
            if (consumer, event.message_id) in claimed:  # the same message twice in one batch
                decisions[i] = duplicate_or_reused(consumer, event, claimed[consumer, event.message_id])
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


def _readable(ready: list[Ready], decisions: dict[int, Decision]) -> list[Ready]:
    """The members as their handlers read them, their subject keys read in one query; each one
    refused (an erased subject's, say) has its dead letter put in ``decisions`` instead."""
    keys = subject_keys(Prepared(event, spec) for _, event, spec in ready)
    members = []
    for i, event, spec in ready:
        try:
            members.append((i, *readable(Prepared(event, spec), keys)))
        except Refused as refused:
            decisions[i] = refused.decision
    return members


class Runs:
    """The runs of consecutive members of one consumer that one run handler takes together
    (``reliable_messaging._runs``). A consumer's run ends, and is handled, when its next member
    has another handler, so its messages keep the batch's order."""

    def __init__(self) -> None:
        # Per consumer: the open run's handler, its members, and whether members came before it.
        self.open: dict[str, tuple[RunHandler, list[tuple[IncomingEvent, Span | None]], bool]] = {}

    def extend(
        self, consumer: str, spec: HandlerSpec, event: IncomingEvent, span: Span | None, *, after_others: bool
    ) -> bool:
        """Add the member to its consumer's run (True), or end that run and leave the member to
        run alone (False: its handler takes one message). ``after_others``: members came before
        it in the batch."""
        handler = cast(RunHandler, spec.handler) if spec.takes_runs else None
        run = self.open.get(consumer)
        if run is not None and run[0] is not handler:
            self._end(consumer)
        if handler is None:
            return False
        self.open.setdefault(consumer, (handler, [], after_others))[1].append((event, span))
        return True

    def end_all(self) -> None:
        for consumer in list(self.open):
            self._end(consumer)

    def _end(self, consumer: str) -> None:
        handler, members, after_others = self.open.pop(consumer)
        if after_others:  # as before a single-message handler: a crash between two handlers' work
            fault_point(f"consumer.{consumer}.between_handlers")
        try:
            run_handler_on(handler, consumer, members)
        except Exception as exc:  # noqa: BLE001 - decided again, in savepoints
            raise MemberFailed(exc) from exc


def _before_batch_commit(deliveries: list[Delivery]) -> None:
    ensure_committable()
    for consumer in sorted({d.consumer for d in deliveries}):
        fault_point(f"consumer.{consumer}.before_commit")  # as for a lone message
        fault_point(f"consumer.{consumer}.before_batch_commit")  # only ever in a batch


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
    consumer: str, event: IncomingEvent, spec: HandlerSpec, savepoints: MemberSavepoints, span: Span | None
) -> Decision | None:
    """A batch member in its savepoint; None when it lost a deadlock or a connection and must be
    decided alone."""
    try:
        with savepoints.member(consumer, event) as claimed:
            if not claimed:
                return duplicate_or_reused(consumer, event, stored_hash(consumer, event))
            run_handler(spec, event, span)
    except BatchBroken:
        raise
    except InvalidPayload as exc:
        return failure(Outcome.DEAD_LETTER, "invalid_payload", exc, event)
    except (OperationalError, InterfaceError) as exc:
        if sqlstate_of(exc) == DEADLOCK_DETECTED:
            logger.info("deadlock inside a batch: decided again alone", extra={"message_id": event.message_id})
            return None
        if not connection.is_usable():
            raise  # the whole batch is gone with the connection
        if connection_lost(exc):  # another alias's: decided alone, on a new one
            logger.info(
                "database connection lost inside a batch: decided again alone", extra={"message_id": event.message_id}
            )
            return None
        return handler_failed(spec, exc, event)
    except InternalError as exc:
        if connection_lost(exc):  # read-only: the whole batch is on a standby, decided again on the primary
            raise
        return handler_failed(spec, exc, event)
    except Exception as exc:  # noqa: BLE001 - any handler failure is retried (its policy's), then dead-lettered
        return handler_failed(spec, exc, event)
    return Decision(Outcome.HANDLED, event)
