"""The consumer loop: one broker connection, one queue per named consumer, manual acks, batches.

Deliveries already waiting are taken together, up to ``CONSUMER_BATCH_SIZE``, and decided in
one transaction (``dispatch.decide_batch``): one commit for the batch, then the retries of the
messages that failed, their dead letters (all of the batch's in one more transaction), then the
acks. A message that can never be handled (not JSON, an unknown event type, a forged producer...)
is refused before any transaction; past ``DEAD_LETTER_FLOOD_LIMIT`` of its reason, it is counted
instead of stored (``_dead_letters``), so a flood of them costs a commit per batch, not per message.
The loop never waits for a batch to fill: at light load a batch is the one message that arrived.
Nothing is acked before its commit. A failing message is retried through the delay ladder (a confirmed publish, then the
ack) until its handler's budget is spent, then stored as a dead letter and acked: never dropped,
never requeued forever, never in the way of the messages behind it. A handler's breaker, when its
declaration names one, holds its messages back while its dependency is down (``_breaker``).
Messages that RabbitMQ itself dead-letters (delivery limit, rejects) land in
``<queue>_dead_letters`` and are moved to the dead-letter table by the same process.

Acks: one ack with ``multiple`` covers a whole batch when every delivery still unsettled on the
channel up to its last tag belongs to the batch (one channel carries several consumers, and
their ``_dead_letters`` consumers); otherwise each message is acked alone. The filesystem broker
ignores ``multiple``, so there every message is acked alone.

The parts: the loop, its connection and its two kinds of deliveries here, with the dead letters
stored (``store_dead_letters``); a batch decided and settled in ``reliable_messaging._consumer_batch``.
"""

import dataclasses
import functools
import logging
import time
from typing import Any

from django.db import DatabaseError
from kombu import Connection, Consumer
from kombu.message import Message

from reliable_messaging import _broker as broker
from reliable_messaging._breaker import Breakers
from reliable_messaging._conf import exchange_name, queue_name, setting
from reliable_messaging._consumer_batch import (
    BatchSettling,
    DatabaseDown,
    RetryNotPublished,
    delivery_of,
    log_context,
    raw_body,
)
from reliable_messaging._dead_letters import Failed, dead_letter_record, dead_letters_record
from reliable_messaging._edge import death_of
from reliable_messaging._health import database_reachable
from reliable_messaging._heartbeat import HandlerHeartbeat
from reliable_messaging._lifecycle import DATABASE_BACKOFF_MAX, Backoff, Stopper, drop_broken_db_connections
from reliable_messaging._producers import UNAUTHENTICATED, producer_refusal
from reliable_messaging._publisher import BatchPublisher, ConfirmTimeout
from reliable_messaging._session import BrokerSession

# What other modules import from here (defined in consumer_batch, re-exported).
__all__ = [
    "ConsumerWorker",
    "DatabaseDown",
    "RetryNotPublished",
    "delivery_of",
    "log_context",
    "raw_body",
    "store_dead_letter",
    "store_dead_letters",
]

logger = logging.getLogger("reliable_messaging.consumer")


class ConsumerWorker(BatchSettling):
    def __init__(
        self,
        consumers: list[str],
        *,
        stopper: Stopper | None = None,
        idle_timeout: float = 1.0,
        batch_size: int | None = None,
    ):
        self.consumers = list(consumers)
        self.stopper = stopper or Stopper()
        self.idle_timeout = idle_timeout
        wanted = max(1, batch_size or setting("CONSUMER_BATCH_SIZE"))
        self.prefetch = setting("CONSUMER_PREFETCH")
        # The broker sends at most ``prefetch`` unacked messages: a batch can never be larger.
        self.batch_size = min(wanted, self.prefetch)
        if self.batch_size < wanted:
            logger.warning(
                "CONSUMER_PREFETCH (%d) caps batches below CONSUMER_BATCH_SIZE (%d): raise the prefetch to batch more",
                self.prefetch,
                wanted,
            )
        self.session = BrokerSession()
        self._breakers = Breakers()  # per handler, for this process's life
        # Counts failures in a row: reset whenever the broker and the database are seen working.
        self._backoff = Backoff()
        self._retry_publisher: BatchPublisher | None = None
        self._heartbeat: HandlerHeartbeat | None = None
        self._last_delivery = time.monotonic()
        self._arrived: list[tuple[str, Message]] = []  # (consumer, message) taken, not yet decided
        self._unsettled: set[int] = set()  # delivery tags of this channel neither acked nor rejected

    # --- the loop --------------------------------------------------------------------------
    def run(self, *, once: bool = False) -> int:
        while not self.stopper.stopping:
            drop_broken_db_connections()
            try:
                self._connect()
                self._consume(once=once)
                if once:
                    break
            except DatabaseDown:
                self._disconnect()
                logger.warning("database unavailable: consuming paused until it is back")
                self._wait_for_database()
            except (ConfirmTimeout, RetryNotPublished) + self.session.errors() as exc:
                self._disconnect(graceful=False)
                if once:
                    logger.warning("broker unavailable: %s: %s", type(exc).__name__, exc)
                    return 1
                delay = self._backoff.next_delay()
                logger.warning("broker unavailable: %s: %s; connecting again in %.1fs", type(exc).__name__, exc, delay)
                self.stopper.sleep(delay)
            else:
                self._backoff.reset()
        self._disconnect()
        return 0

    def _consume(self, *, once: bool) -> None:
        self._last_delivery = time.monotonic()
        # Wake often enough to send heartbeats at twice the negotiated rate.
        wait = min(1.0, self.session.heartbeat / 4) if self.session.heartbeat else 1.0
        if (connection := self.session.connection) is None:  # _connect made it; nothing replaces it in here
            raise RuntimeError("consuming with no broker connection")
        while not self.stopper.stopping:
            try:  # messages kept from the last batch (a breaker's trial) go on at once
                connection.drain_events(timeout=0 if self._arrived else wait)
            except TimeoutError:
                self._backoff.reset()  # a quiet connection that works: the next outage starts from the shortest delay
                if once and not self._arrived and time.monotonic() - self._last_delivery >= self.idle_timeout:
                    return
            self._take_what_is_waiting(connection)
            if self._arrived:
                self._handle_batch()
                self._backoff.reset()  # a batch decided and settled: the database and the broker work
            self.session.heartbeat_check()

    def _take_what_is_waiting(self, connection: Connection) -> None:
        """More deliveries that have already arrived, up to the batch size; never wait for one."""
        while len(self._arrived) < self.batch_size:
            try:
                connection.drain_events(timeout=0)
            except TimeoutError:
                return

    def _connect(self) -> None:
        if self.session.connected:
            return
        self._disconnect(graceful=False)
        connection = self.session.open()
        if self.session.heartbeat:
            self._heartbeat = HandlerHeartbeat(connection.connection, self.session.heartbeat)
        # Ready before the first consume: deliveries may arrive while the next one starts.
        self._retry_publisher = BatchPublisher(connection, setting("RELAY_CONFIRM_TIMEOUT"))
        channel = connection.channel()
        channel.basic_qos(0, self.prefetch, False)
        for consumer in self.consumers:
            Consumer(
                channel,
                queues=[broker.main_queue(consumer)],
                on_message=functools.partial(self._on_message, consumer),
                auto_declare=False,
            ).consume()
            if self.session.amqp:
                Consumer(
                    channel,
                    queues=[broker.dead_letter_queue(consumer)],
                    on_message=functools.partial(self._on_dead_lettered, consumer),
                    auto_declare=False,
                ).consume()
        logger.info(
            "consuming",
            extra={
                "consumers": self.consumers,
                "queues": [queue_name(consumer) for consumer in self.consumers],
                "exchange": exchange_name(),
                "batch_size": self.batch_size,
                "broker": broker.describe(connection),
            },
        )

    def _disconnect(self, *, graceful: bool = True) -> None:
        """Close the broker connection; after an error, drop it without waiting for the broker."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        self.session.end(self._retry_publisher, graceful=graceful)
        self._retry_publisher = None
        # Deliveries of a closed channel go back to the queue: none of them can be settled now.
        self._arrived.clear()
        self._unsettled.clear()

    def _wait_for_database(self) -> None:
        while not self.stopper.stopping:
            self.stopper.sleep(min(self._backoff.next_delay(), DATABASE_BACKOFF_MAX))
            if database_reachable():
                logger.info("database is back: consuming again")
                return

    # --- deliveries ------------------------------------------------------------------------
    def _on_message(self, consumer: str, message: Message) -> None:
        self._last_delivery = time.monotonic()
        self._unsettled.add(message.delivery_tag)
        self._arrived.append((consumer, message))

    def _on_dead_lettered(self, consumer: str, message: Message) -> None:
        """A message RabbitMQ dead-lettered (delivery limit, reject): move it to the table."""
        self._last_delivery = time.monotonic()
        self._unsettled.add(message.delivery_tag)
        headers = dict(message.headers or {})
        properties = {k: v for k, v in message.properties.items() if k != "application_headers"}
        # Whatever a publisher put in x-death (this queue takes anyone's message): what can be read.
        arrived_key = message.delivery_info.get("routing_key", "")
        death = death_of(headers, default_queue=queue_name(consumer), default_routing_key=arrived_key)
        error = f"RabbitMQ dead-lettered it from {death.queue}: {death.reason}"
        reason, error = f"broker_{death.reason}"[:100], f"{error} ({death.note})" if death.note else error
        # Anyone allowed to publish into this queue can flood it: a message its event type's owner did
        # not publish is refused as on the main queue, counted only past the flood limit.
        if refusal := producer_refusal(str(headers.get("event_type") or ""), properties.get("user_id")):
            reason, error = UNAUTHENTICATED, f"{refusal} (found in {broker.dead_letter_queue_name(consumer)})"
        failed = Failed(consumer=consumer, body=raw_body(message), properties=properties, headers=headers,
                        routing_key=death.routing_key, reason=reason, error=error, attempts=death.count,
                        refused=reason == UNAUTHENTICATED)  # fmt: skip
        try:
            store_dead_letters([failed])
        except DatabaseDown:
            self._requeue(message)
            raise
        self._ack([message])

    # --- dead letters: stored here, beside store_dead_letters ---------------------------------
    def _store_dead_letters(self, dead: list[tuple[Message, Failed]]) -> None:
        """Store a batch's dead letters together (their acks follow, with the batch's); when the
        database is down, each goes back to the broker."""
        try:
            store_dead_letters([failed for _, failed in dead])
        except DatabaseDown:
            for message, _ in dead:
                if self.session.amqp:
                    self._reject(message)  # the broker keeps it in <queue>_dead_letters until the database is back
                else:
                    self._requeue(message)
            raise


def store_dead_letters(failed: list[Failed]) -> None:
    """Store dead letters in one transaction (``dead_letters_record``); ``DatabaseDown`` only when
    the database does not answer. When it refuses them while it answers, each is stored alone
    (``store_dead_letter``), in full."""
    try:
        dead_letters_record(failed)
    except DatabaseError as exc:
        if not database_reachable():
            raise DatabaseDown("could not store a dead letter") from None
        logger.warning("the database refused %d dead letters together: stored one by one: %s", len(failed), exc)
        for one in failed:
            store_dead_letter(**{f.name: getattr(one, f.name) for f in dataclasses.fields(one) if f.name != "refused"})


def store_dead_letter(**fields: Any) -> None:
    """Store a dead letter; ``DatabaseDown`` only when the database does not answer.

    A row the database refuses while it answers is not an outage: taken for one, the message
    would come back after the pause, be refused again, and stall the consumer for ever. It is
    stored without its headers and properties instead (the body, being bytes, always fits), the
    refusal in its error.
    """
    try:
        dead_letter_record(**fields)
    except DatabaseError as exc:
        if not database_reachable():
            raise DatabaseDown("could not store a dead letter") from None
        logger.error("the database refused a dead letter: stored without its headers: %s", exc)
        refused = f"{type(exc).__name__}: {exc}; message id {fields['properties'].get('message_id')!r}"
        error = f"{fields.get('error', '')}\n(its headers and properties left out, refused by the database: {refused})"
        try:
            dead_letter_record(**{**fields, "properties": {}, "headers": {}, "error": error})
        except DatabaseError:
            raise DatabaseDown("could not store a dead letter") from None
