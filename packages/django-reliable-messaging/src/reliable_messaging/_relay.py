"""The outbox relay: claims pending rows, publishes them with confirms, marks them published.

One batch is one database transaction::

    BEGIN
    SELECT ... WHERE unpublished ORDER BY created_at LIMIT n FOR UPDATE SKIP LOCKED
    publish every row (persistent, mandatory), then wait for the broker's confirms
    UPDATE ... SET published_at = now() WHERE id IN (confirmed and not returned)
    COMMIT

The row locks are held while publishing, so any number of relays can run without leases:
a relay that dies mid-batch releases its rows and another publishes them again (consumers
deduplicate by ``message_id``). Rows are never drained by an id cursor: a sequence value is
taken at insert, not at commit, so a slow transaction's row would be skipped.

A payload stored apart (``CLAIM_CHECK_BYTES``, ``reliable_messaging._claim_check``) is stored
between two batches, outside any transaction: a claimed row whose payload this relay has not
stored yet is left unmarked (its lock goes with the commit), stored, and published by the next
claim, with its reference. A slow storage then holds no row lock, and a failure to store counts
as the row's refusal (retried, then parked).

Pipelines: ``run_outbox_relay --pipelines N`` (``RELAY_PIPELINES``, 2) runs N such loops in
one process, each with its own database connection and broker connection, so that one batch's wait for
its confirms overlaps the next batch's claim and publication; every row stays locked until its
own batch is marked. Measured in ``make bench`` (figure 2).

Waking up: on PostgreSQL a statement-level trigger (migration 0002) sends one
``NOTIFY messaging_outbox`` per inserting transaction, and the relay ``LISTEN``s on its own
connection, so a new row is relayed as soon as it commits; polling every
``RELAY_POLL_INTERVAL`` stays as the fallback (rows due for a retry, a lost connection). On
SQLite the relay only polls. While idle it keeps reading the broker's socket for heartbeats.
"""

import json
import logging
import select
import threading
import time
import uuid
from datetime import datetime, timedelta
from functools import cache
from typing import Any, NamedTuple

import psycopg
from django.db import DatabaseError, InterfaceError, connection, connections, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from opentelemetry.trace import Span

from reliable_messaging import _broker as broker
from reliable_messaging import _claim_check as claim_check
from reliable_messaging import _metrics as metrics
from reliable_messaging import _telemetry as telemetry
from reliable_messaging._conf import duration, exchange_name, setting
from reliable_messaging._envelope import encode_body, envelope_for_outbox
from reliable_messaging._faults import fault_point
from reliable_messaging._housekeeping import messages_purge
from reliable_messaging._lifecycle import DATABASE_BACKOFF_MAX, Backoff, Stopper, drop_broken_db_connections
from reliable_messaging._publisher import BatchPublisher, ConfirmTimeout, PublishResult
from reliable_messaging._scheduled import MOVED_PER_TRANSACTION, any_due, move_due_messages
from reliable_messaging._session import BrokerSession
from reliable_messaging.models import OutboxMessage

logger = logging.getLogger("reliable_messaging.relay")

MAX_RETRY_DELAY = 300.0
NOTIFY_CHANNEL = "messaging_outbox"  # sent by the trigger of migration 0002
APPLICATION_NAME = "outbox_relay"  # how a relay's connection shows in pg_stat_activity
IDLE_SLICE = 0.5  # longest uninterrupted wait: bounds the reaction to SIGTERM
MOVE_PASSES = 20  # scheduled messages moved per look, at most: 20 transactions of 500
# Claim checks a relay keeps for rows it stored and has not published (another relay may have):
# past this many, forgotten (a row stored again has a second copy, removed with its row).
REMEMBERED_CLAIM_CHECKS = 10_000


class ClaimedRow(NamedTuple):
    """What building a message needs; named rows instead of model instances keep the claim cheap."""

    id: int
    event_id: uuid.UUID
    source: str
    event_type: str
    schema_version: int
    correlation_id: str
    causation_id: str
    traceparent: str
    tracestate: str
    payload: Any
    created_at: datetime
    attempts: int


CLAIM_FIELDS = ClaimedRow._fields


def retry_delay(attempts: int) -> float:
    """Seconds before a refused row is tried again: 2, 4, 8, ... capped at five minutes."""
    return min(MAX_RETRY_DELAY, 2.0**attempts)


def claim_query(batch_size: int) -> "QuerySet[OutboxMessage, Any]":
    """Up to ``batch_size`` publishable rows that no other relay holds, locked (named tuples).

    The filter is exactly the predicate of ``outbox_pending_idx``, so the claim reads that
    small index however many published rows the table keeps.
    """
    return (
        OutboxMessage.objects.select_for_update(skip_locked=True)
        .filter(published_at__isnull=True, parked_at__isnull=True)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=timezone.now()))
        .order_by("created_at", "id")
        .values_list(*CLAIM_FIELDS, named=True)[:batch_size]
    )


@cache
def _claim_sql() -> str:
    """``claim_query`` as one fixed text (PostgreSQL): compiling the queryset for every batch cost
    a relay as much CPU as the rest of its claim."""
    table = OutboxMessage._meta.db_table
    return (
        f"SELECT {', '.join(CLAIM_FIELDS)} FROM {table} WHERE published_at IS NULL AND parked_at IS NULL "
        "AND (next_attempt_at IS NULL OR next_attempt_at <= %s) ORDER BY created_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
    )


def claim_batch(batch_size: int) -> list[ClaimedRow]:
    if connection.vendor != "postgresql":
        return list(claim_query(batch_size))  # Django's named rows: the same fields as ClaimedRow
    payload = CLAIM_FIELDS.index("payload")
    with connection.cursor() as cursor:
        cursor.execute(_claim_sql(), [timezone.now(), batch_size])
        # Django reads jsonb as text and leaves decoding it to the field: decoded here likewise.
        return [
            ClaimedRow._make((*row[:payload], json.loads(row[payload]), *row[payload + 1 :]))
            for row in cursor.fetchall()
        ]


def mark_published(ids: list[int]) -> None:
    if connection.vendor == "postgresql":
        # One array parameter: 500 placeholders cost more to build and parse than the update.
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {OutboxMessage._meta.db_table} SET published_at = %s WHERE id = ANY(%s)",
                [timezone.now(), ids],
            )
    else:
        OutboxMessage.objects.filter(pk__in=ids).update(published_at=timezone.now())


def record_failure(row: ClaimedRow, reason: str, max_attempts: int) -> None:
    """Count a refusal of a claimed ``row`` (by the broker, or by the storage of its payload): retry
    it later, or park it after its attempts."""
    now = timezone.now()
    attempts = row.attempts + 1
    extra = {"message_id": str(row.event_id), "event_type": row.event_type, "correlation_id": row.correlation_id}
    changes: dict[str, Any] = {"attempts": attempts, "last_error": reason[:2000]}
    if attempts >= max_attempts:
        changes["parked_at"] = now
        logger.error("outbox row parked after %d attempts: %s", attempts, reason, extra=extra)
    else:
        changes["next_attempt_at"] = now + timedelta(seconds=retry_delay(attempts))
        logger.warning("outbox row not published, will retry: %s", reason, extra=extra)
    # A row whose payload could not be stored is no longer locked: another relay may have published it.
    OutboxMessage.objects.filter(pk=row.id, published_at__isnull=True).update(**changes)


class Wakeup:
    """``LISTEN`` for new outbox rows on Django's own connection (PostgreSQL only).

    No second connection per relay: PostgreSQL's connection budget is shared. ``LISTEN`` is a
    session setting, so it is issued again whenever Django has opened a new connection.
    Notifications that arrive during a batch are queued by psycopg; ``drain`` empties that
    queue, so it stays small however long a backlog takes.
    """

    def __init__(self) -> None:
        self._listening_on: psycopg.Connection[Any] | None = None  # the connection LISTEN was issued on

    @property
    def enabled(self) -> bool:
        return connection.vendor == "postgresql"

    def ensure_listening(self) -> None:
        if not self.enabled:
            return
        connection.ensure_connection()
        raw = connection.connection
        if raw is self._listening_on:
            return
        with connection.cursor() as cursor:
            cursor.execute(f"SET application_name = '{APPLICATION_NAME}'")
            cursor.execute(f"LISTEN {NOTIFY_CHANNEL}")
            cursor.execute("SELECT pg_backend_pid()")
            backend_pid = cursor.fetchone()[0]
        self._listening_on = raw
        logger.info("relay listening for new outbox rows", extra={"backend_pid": backend_pid})

    def fileno(self) -> int | None:
        raw = self._listening_on
        if raw is None or raw is not connection.connection or raw.closed:
            return None
        return raw.fileno()

    def drain(self) -> bool:
        """Take every notification received so far, without blocking; True if there was one."""
        raw = self._listening_on
        if raw is None or raw is not connection.connection:
            return False
        with connection.wrap_database_errors:
            return sum(1 for _ in raw.notifies(timeout=0.0)) > 0


class OutboxRelay:
    def __init__(
        self,
        *,
        batch_size: int | None = None,
        stopper: Stopper | None = None,
        declare_topology: bool = True,
        housekeeping: bool = True,
    ) -> None:
        self.batch_size = batch_size or setting("RELAY_BATCH_SIZE")
        self.poll_interval = setting("RELAY_POLL_INTERVAL")
        self.confirm_timeout = setting("RELAY_CONFIRM_TIMEOUT")
        self.max_attempts = setting("RELAY_MAX_ATTEMPTS")
        self.stopper = stopper or Stopper()
        self.exchange = exchange_name()
        self.wakeup = Wakeup()
        self.session = BrokerSession(declare_topology=declare_topology)
        self._publisher: BatchPublisher | None = None
        self._next_move = 0.0  # monotonic time of the next look for scheduled messages due
        # HOUSEKEEPING_INTERVAL None: a cron runs purge_messages instead. The first purge at start.
        housekeeping = housekeeping and setting("HOUSEKEEPING_INTERVAL") is not None
        self.housekeeping_interval = duration("HOUSEKEEPING_INTERVAL").total_seconds() if housekeeping else 0
        self._next_purge = 0.0
        self._stored: dict[uuid.UUID, dict[str, Any]] = {}  # event id -> its claim check, not yet published

    # --- one batch -------------------------------------------------------------------------
    def relay_batch(self) -> int:
        """Publish one batch; return how many rows were claimed."""
        started = time.monotonic()
        with transaction.atomic():
            if connection.vendor == "postgresql":
                # A relay that hangs while holding row locks must not hold them forever.
                timeout_ms = int(self.confirm_timeout * 4000)
                with connection.cursor() as cursor:
                    cursor.execute(f"SET LOCAL idle_in_transaction_session_timeout = {timeout_ms}")
            claimed = claim_batch(self.batch_size)
            if not claimed:
                return 0
            bodies = {row.id: encode_body(row.payload) for row in claimed}
            # Stored after this transaction, published by the next claim.
            to_store = [
                row for row in claimed if row.event_id not in self._stored and claim_check.stored_apart(bodies[row.id])
            ]
            waiting = {row.id for row in to_store}
            rows = [row for row in claimed if row.id not in waiting]
            spans = self._producer_spans(rows)
            try:
                envelopes = [
                    envelope_for_outbox(
                        row,
                        self.exchange,
                        telemetry.trace_headers(span) if span else None,
                        body=bodies[row.id],
                        stored=self._stored.get(row.event_id),
                    )
                    for row, span in zip(rows, spans, strict=True)
                ]
                if not envelopes:  # every row claimed waits for its payload to be stored
                    result = PublishResult()
                elif self._publisher is None:  # run() connects before every batch
                    raise RuntimeError("the relay has no broker connection")
                else:
                    result = self._publisher.publish(envelopes)
            except BaseException as exc:
                for recording in filter(None, spans):
                    telemetry.fail(recording, f"{type(exc).__name__}: {exc}")
                    recording.end()
                raise
            for row, span in zip(rows, spans, strict=True):
                if span:
                    if (reason := result.failed.get(str(row.event_id))) is not None:
                        telemetry.fail(span, reason)
                    span.end()
            fault_point("relay.after_confirm")
            if result.failed:
                by_message_id = {str(row.event_id): row for row in rows}
                delivered_ids = [by_message_id[mid].id for mid in result.delivered]
            else:
                delivered_ids = [row.id for row in rows]
            if delivered_ids:
                mark_published(delivered_ids)
            for message_id, reason in result.failed.items():
                record_failure(by_message_id[message_id], reason, self.max_attempts)
        for row in rows:
            self._stored.pop(row.event_id, None)
        self._store_apart(to_store, bodies)
        metrics.relay_batch(len(delivered_ids), result.failed, time.monotonic() - started)
        if logger.isEnabledFor(logging.DEBUG):
            published = set(delivered_ids)
            for row in (row for row in rows if row.id in published):
                logger.debug("published", extra={"message_id": str(row.event_id), "event_type": row.event_type})
        logger.info("relayed a batch", extra={"claimed": len(claimed), "published": len(delivered_ids)})
        return len(claimed)

    def _store_apart(self, rows: list[ClaimedRow], bodies: dict[int, bytes]) -> None:
        """Store the payloads of ``rows`` (no transaction open): the next claim publishes them."""
        if len(self._stored) > REMEMBERED_CLAIM_CHECKS:
            self._stored.clear()
        for row in rows:
            try:
                self._stored[row.event_id] = claim_check.store(row.event_type, str(row.event_id), bodies[row.id])
            except Exception as exc:  # noqa: BLE001 - any storage's own errors: the row is retried, then parked
                record_failure(
                    row, f"its payload could not be stored apart: {type(exc).__name__}: {exc}", self.max_attempts
                )

    def _producer_spans(self, rows: list[ClaimedRow]) -> list[Span | None]:
        """A PRODUCER span per row, child of the span it was written in; Nones when tracing is off
        (the messages then carry the row's own ``traceparent``)."""
        if not telemetry.enabled():
            return [None] * len(rows)
        return [
            telemetry.producer_span(
                stored={"traceparent": row.traceparent, "tracestate": row.tracestate},
                exchange=self.exchange,
                routing_key=row.event_type,
                message_id=str(row.event_id),
                correlation_id=row.correlation_id,
            )
            for row in rows
        ]

    # --- the loop --------------------------------------------------------------------------
    def run(self, *, once: bool = False) -> int:
        """Relay until stopped (or, with ``once``, until nothing is claimable); the exit code."""
        backoff = Backoff()
        while not self.stopper.stopping:
            drop_broken_db_connections()
            self._move_scheduled()  # needs no broker: due messages wait in the outbox meanwhile
            if not once:
                self._housekeep()
            try:
                self._ensure_broker()
                # LISTEN before claiming: a row committed after the claim's snapshot notifies.
                self.wakeup.ensure_listening()
                # Notifications so far concern rows the next claim sees: drop them unread.
                self.wakeup.drain()
                claimed = self.relay_batch()
                if not claimed and not once:
                    self._wait_for_rows()
            except DatabaseError as exc:
                logger.warning("database unavailable: %s", exc)
                connection.close()
                if once:
                    return 1
                self.stopper.sleep(min(backoff.next_delay(), DATABASE_BACKOFF_MAX))
                continue
            except (ConfirmTimeout,) + self.session.errors() as exc:
                logger.warning("broker unavailable: %s: %s", type(exc).__name__, exc)
                self._reset_broker(graceful=False)
                if once:
                    return 1
                self.stopper.sleep(backoff.next_delay())
                continue
            backoff.reset()
            if once and not claimed:
                break
        self._reset_broker()
        return 0

    def _move_scheduled(self) -> None:
        """Scheduled messages whose time has come, into the outbox; looked for once per poll
        interval (one indexed read), so a message is published within that long of its time."""
        now = time.monotonic()
        if now < self._next_move:
            return
        self._next_move = now + self.poll_interval
        try:
            for _ in range(MOVE_PASSES):
                if not any_due() or move_due_messages() < MOVED_PER_TRANSACTION:
                    return
        except (DatabaseError, InterfaceError) as exc:  # a lost database: the claim below backs off
            logger.warning("scheduled messages not moved, again in %.1fs: %s", self.poll_interval, exc)

    def _housekeep(self) -> None:
        """Purge what is past its retention, once every HOUSEKEEPING_INTERVAL (several relays may:
        the purge skips what another holds)."""
        now = time.monotonic()
        if not self.housekeeping_interval or now < self._next_purge:
            return
        self._next_purge = now + self.housekeeping_interval
        try:
            purged = messages_purge()
        except (DatabaseError, InterfaceError) as exc:  # a lost database: the claim below backs off
            logger.warning("housekeeping failed, again in %ds: %s", self.housekeeping_interval, exc)
            return
        for table in ("outbox", "inbox", "event_log", "dead_letters", "stored_payloads"):
            metrics.PURGED.labels(table).inc(getattr(purged, table))
        logger.info("purged past their retention: %s", purged)

    def _wait_for_rows(self) -> None:
        """Idle until a notification or the next poll, reading the broker's heartbeats meanwhile."""
        deadline = time.monotonic() + self.poll_interval
        while not self.stopper.stopping:
            if self.wakeup.drain():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            broker_fd = self.session.fileno()
            sockets = [fd for fd in (self.wakeup.fileno(), broker_fd) if fd is not None]
            if not sockets:
                self.stopper.sleep(min(remaining, IDLE_SLICE))
                continue
            readable, _, _ = select.select(sockets, [], [], min(remaining, IDLE_SLICE))
            # A broker fileno means a connection.
            if broker_fd in readable and (broker_connection := self.session.connection) is not None:
                try:
                    broker_connection.drain_events(timeout=0)
                except TimeoutError:
                    pass
            self.session.heartbeat_check()

    def _ensure_broker(self) -> None:
        if self.session.connected:
            return
        self._reset_broker(graceful=False)
        connection = self.session.open()
        self._publisher = BatchPublisher(connection, self.confirm_timeout)
        logger.info("relay connected to the broker", extra={"broker": broker.describe(connection)})

    def _reset_broker(self, *, graceful: bool = True) -> None:
        """Close the broker connection; after an error, drop it without waiting for the broker."""
        self.session.end(self._publisher, graceful=graceful)
        self._publisher = None


def run_pipelines(count: int, *, batch_size: int | None, stopper: Stopper, once: bool) -> int:
    """``count`` relays in this process, each a thread with its own database connection and
    broker connection: while one waits for its batch's confirms, another claims and publishes the
    next (SKIP LOCKED keeps their batches apart). The exit code: 0 unless one failed."""
    logger.info(
        "relay started",
        extra={
            "pipelines": count,
            "batch_size": batch_size or setting("RELAY_BATCH_SIZE"),
            "exchange": exchange_name(),
            "broker": broker.describe(broker.connect()),
        },
    )
    if count == 1:
        return OutboxRelay(batch_size=batch_size, stopper=stopper).run(once=once)
    codes: list[int] = []

    def pipeline(n: int) -> None:
        try:  # one pipeline keeps house
            codes.append(OutboxRelay(batch_size=batch_size, stopper=stopper, housekeeping=n == 0).run(once=once))
        except BaseException:
            # A pipeline that died stops the others: the process exits 1 and is restarted whole,
            # instead of running on at part of its capacity.
            logger.exception("relay pipeline failed: stopping the relay")
            codes.append(1)
            stopper.stopping = True
        finally:
            connections.close_all()

    # Daemon threads: a second signal (SystemExit in the main thread) ends the process at once.
    threads = [threading.Thread(target=pipeline, args=(n,), name=f"relay-{n}", daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.2)  # the main thread keeps taking signals
    return max(codes, default=1)
