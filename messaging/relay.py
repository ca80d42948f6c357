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
"""

import logging
import time
from datetime import timedelta

from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from messaging import broker, metrics
from messaging.conf import exchange_name, setting
from messaging.envelope import envelope_for_outbox
from messaging.faults import fault_point
from messaging.lifecycle import Backoff, Stopper, drop_broken_db_connections
from messaging.models import OutboxMessage
from messaging.publisher import BatchPublisher, ConfirmTimeout

logger = logging.getLogger(__name__)

MAX_RETRY_DELAY = 300.0


def retry_delay(attempts: int) -> float:
    """Seconds before a refused row is tried again: 2, 4, 8, ... capped at five minutes."""
    return min(MAX_RETRY_DELAY, 2.0**attempts)


def claim_batch(batch_size: int) -> list[OutboxMessage]:
    """Lock up to ``batch_size`` publishable rows that no other relay holds."""
    return list(
        OutboxMessage.objects.select_for_update(skip_locked=True)
        .filter(published_at__isnull=True, parked_at__isnull=True)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=timezone.now()))
        .order_by("created_at", "id")[:batch_size]
    )


def record_failure(row: OutboxMessage, reason: str, max_attempts: int) -> None:
    now = timezone.now()
    row.attempts += 1
    row.last_error = reason[:2000]
    if row.attempts >= max_attempts:
        row.parked_at = now
        logger.error(
            "outbox row parked after %d attempts: %s",
            row.attempts,
            reason,
            extra={"message_id": str(row.event_id), "event_type": row.event_type, "correlation_id": row.correlation_id},
        )
    else:
        row.next_attempt_at = now + timedelta(seconds=retry_delay(row.attempts))
        logger.warning(
            "outbox row refused by the broker, will retry: %s",
            reason,
            extra={"message_id": str(row.event_id), "event_type": row.event_type, "correlation_id": row.correlation_id},
        )
    row.save(update_fields=["attempts", "last_error", "next_attempt_at", "parked_at"])


class OutboxRelay:
    def __init__(
        self,
        *,
        batch_size: int | None = None,
        stopper: Stopper | None = None,
        declare_topology: bool = True,
    ) -> None:
        self.batch_size = batch_size or setting("RELAY_BATCH_SIZE")
        self.poll_interval = setting("RELAY_POLL_INTERVAL")
        self.confirm_timeout = setting("RELAY_CONFIRM_TIMEOUT")
        self.max_attempts = setting("RELAY_MAX_ATTEMPTS")
        self.stopper = stopper or Stopper()
        self.declare_topology = declare_topology
        self.exchange = exchange_name()
        self._connection = None
        self._publisher: BatchPublisher | None = None

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
            rows = claim_batch(self.batch_size)
            if not rows:
                return 0
            envelopes = [envelope_for_outbox(row, self.exchange) for row in rows]
            result = self._publisher.publish(envelopes)
            fault_point("relay.after_confirm")
            by_message_id = {str(row.event_id): row for row in rows}
            delivered_ids = [by_message_id[mid].pk for mid in result.delivered]
            if delivered_ids:
                OutboxMessage.objects.filter(pk__in=delivered_ids).update(published_at=timezone.now())
            for message_id, reason in result.failed.items():
                record_failure(by_message_id[message_id], reason, self.max_attempts)
        metrics.relay_batch(len(delivered_ids), result.failed, time.monotonic() - started)
        logger.debug("relayed batch", extra={"claimed": len(rows), "published": len(delivered_ids)})
        return len(rows)

    # --- the loop --------------------------------------------------------------------------
    def run(self, *, once: bool = False) -> int:
        """Relay until stopped (or, with ``once``, until nothing is claimable); the exit code."""
        backoff = Backoff()
        while not self.stopper.stopping:
            drop_broken_db_connections()
            try:
                self._ensure_broker()
                claimed = self.relay_batch()
            except DatabaseError as exc:
                logger.warning("database unavailable: %s", exc)
                connection.close()
                if once:
                    return 1
                self.stopper.sleep(backoff.next_delay())
                continue
            except (OSError, ConfirmTimeout, *self._broker_errors()) as exc:
                logger.warning("broker unavailable: %s: %s", type(exc).__name__, exc)
                self._reset_broker()
                if once:
                    return 1
                self.stopper.sleep(backoff.next_delay())
                continue
            backoff.reset()
            if claimed:
                continue
            if once:
                break
            self._wait_for_rows()
        self._reset_broker()
        return 0

    def _wait_for_rows(self) -> None:
        """Idle until the next poll, reading the broker's heartbeats meanwhile."""
        if broker.supports_confirms(self._connection):
            self._connection.heartbeat_check()
            try:
                self._connection.drain_events(timeout=self.poll_interval)
            except TimeoutError:
                pass
        else:
            self.stopper.sleep(self.poll_interval)

    def _ensure_broker(self) -> None:
        if self._connection is not None and self._connection.connected:
            return
        self._reset_broker()
        self._connection = broker.connect()
        self._connection.connect()
        if self.declare_topology:
            broker.declare_topology(self._connection)
        self._publisher = BatchPublisher(self._connection, self.confirm_timeout)
        logger.info("relay connected to the broker", extra={"broker": self._connection.as_uri()})

    def _broker_errors(self) -> tuple[type[BaseException], ...]:
        if self._connection is None:
            return ()
        return tuple(self._connection.connection_errors) + tuple(self._connection.channel_errors)

    def _reset_broker(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
        broker.close_quietly(self._connection)
        self._connection = None
        self._publisher = None
