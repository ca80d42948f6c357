"""The consumer loop: one broker connection, one queue per named consumer, manual acks.

Each delivery is decided by ``dispatch.decide`` (inbox row, handler and outbox rows in one
transaction) and only then acked. A failing message is retried through a delay queue
(a confirmed publish, then the ack) until its budget is spent, then stored as a dead letter
and acked: never dropped, never requeued forever, and never in the way of the messages
behind it. Messages that RabbitMQ itself dead-letters (delivery limit, rejects) land in
``<queue>_dlq`` and are moved to the dead-letter table by the same process.
"""

import functools
import logging
import time
from contextlib import nullcontext

import structlog
from django.db import DatabaseError
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from kombu import Consumer

from messaging import broker, metrics
from messaging.conf import queue_name, setting
from messaging.dead_letters import dead_letter_record
from messaging.dispatch import Decision, Outcome, database_reachable, decide
from messaging.envelope import ATTEMPT_HEADER, Envelope
from messaging.faults import fault_point
from messaging.heartbeat import HandlerHeartbeat
from messaging.lifecycle import Backoff, Stopper, drop_broken_db_connections
from messaging.publisher import BatchPublisher, ConfirmTimeout
from messaging.tracecontext import trace_id_of

logger = logging.getLogger(__name__)


class DatabaseDown(Exception):
    """The database cannot be reached: stop consuming until it is back."""


class RetryNotPublished(Exception):
    """The broker did not take a retry; the original is requeued instead."""


class ConsumerWorker:
    def __init__(self, consumers: list[str], *, stopper: Stopper | None = None, idle_timeout: float = 1.0):
        self.consumers = list(consumers)
        self.stopper = stopper or Stopper()
        self.idle_timeout = idle_timeout
        self.prefetch = setting("CONSUMER_PREFETCH")
        self.max_attempts = setting("CONSUMER_MAX_ATTEMPTS")
        self._connection = None
        self._retry_publisher: BatchPublisher | None = None
        self._confirms = False
        self._heartbeat: HandlerHeartbeat | None = None
        self._last_delivery = time.monotonic()

    # --- the loop --------------------------------------------------------------------------
    def run(self, *, once: bool = False) -> int:
        backoff = Backoff()
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
                self._wait_for_database(backoff)
            except (OSError, ConfirmTimeout, RetryNotPublished, *self._broker_errors()) as exc:
                logger.warning("broker unavailable: %s: %s", type(exc).__name__, exc)
                self._disconnect(graceful=False)
                if once:
                    return 1
                self.stopper.sleep(backoff.next_delay())
            else:
                backoff.reset()
        self._disconnect()
        return 0

    def _consume(self, *, once: bool) -> None:
        self._last_delivery = time.monotonic()
        # Wake often enough to send heartbeats at twice the negotiated rate.
        heartbeat = getattr(self._connection.connection, "heartbeat", 0) if self._confirms else 0
        wait = min(1.0, heartbeat / 4) if heartbeat else 1.0
        while not self.stopper.stopping:
            try:
                self._connection.drain_events(timeout=wait)
            except TimeoutError:
                if once and time.monotonic() - self._last_delivery >= self.idle_timeout:
                    return
            if self._confirms:
                self._connection.heartbeat_check()

    def _connect(self) -> None:
        if self._connection is not None and self._connection.connected:
            return
        self._disconnect()
        connection = broker.connect()
        connection.connect()
        self._connection = connection
        self._confirms = broker.supports_confirms(connection)
        negotiated = getattr(connection.connection, "heartbeat", 0) if self._confirms else 0
        if negotiated:
            self._heartbeat = HandlerHeartbeat(connection.connection, negotiated)
        broker.declare_topology(connection)
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
            if self._confirms:
                Consumer(
                    channel,
                    queues=[broker.dead_letter_queue(consumer)],
                    on_message=functools.partial(self._on_dead_lettered, consumer),
                    auto_declare=False,
                ).consume()
        logger.info("consuming", extra={"consumers": self.consumers})

    def _disconnect(self, *, graceful: bool = True) -> None:
        """Close the broker connection; after an error, drop it without waiting for the broker."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        if not graceful:
            broker.drop(self._connection)
        else:
            if self._retry_publisher is not None:
                self._retry_publisher.close()
            broker.close_quietly(self._connection)
        self._connection = None
        self._retry_publisher = None

    def _broker_errors(self) -> tuple[type[BaseException], ...]:
        if self._connection is None:
            return ()
        return tuple(self._connection.connection_errors) + tuple(self._connection.channel_errors)

    def _wait_for_database(self, backoff: Backoff) -> None:
        while not self.stopper.stopping:
            self.stopper.sleep(backoff.next_delay())
            if database_reachable():
                logger.info("database is back: consuming again")
                return

    # --- one delivery ----------------------------------------------------------------------
    def _on_message(self, consumer: str, message) -> None:
        self._last_delivery = time.monotonic()
        # A handler's error may have broken any connection of the process (the gateway's too):
        # replace broken ones now, or every later message would fail on them until a restart.
        drop_broken_db_connections()
        headers = dict(message.headers or {})
        properties = {k: v for k, v in message.properties.items() if k != "application_headers"}
        routing_key = message.delivery_info.get("routing_key", "")
        context = {
            "consumer": consumer,
            "message_id": str(properties.get("message_id") or "-"),
            "event_type": str(headers.get("event_type") or "-"),
            "correlation_id": str(properties.get("correlation_id") or "-"),
            "trace_id": trace_id_of(str(headers.get("traceparent") or "")) or "-",
        }
        with structlog.contextvars.bound_contextvars(**context):
            started = time.monotonic()
            with self._heartbeat.handling() if self._heartbeat else nullcontext():
                decision = decide(
                    consumer, body=raw_body(message), properties=properties, headers=headers, routing_key=routing_key
                )
            try:
                settled = self._settle(consumer, message, decision, properties, headers, routing_key)
            except DatabaseDown:
                metrics.consumer_message(consumer, context["event_type"], "database_down", time.monotonic() - started)
                raise
            metrics.consumer_message(consumer, context["event_type"], settled.value, time.monotonic() - started)

    def _settle(self, consumer: str, message, decision: Decision, properties, headers, routing_key) -> Outcome:
        """Ack, retry or dead-letter the delivery; what was done (a last retry is a dead letter)."""
        outcome = decision.outcome
        if outcome is Outcome.HANDLED:
            fault_point(f"consumer.{consumer}.before_ack")
            logger.info("handled")
            message.ack()
        elif outcome is Outcome.DUPLICATE:
            logger.info("duplicate: already handled, acked without effect")
            message.ack()
        elif outcome is Outcome.DATABASE_DOWN:
            message.requeue()
            raise DatabaseDown(decision.error)
        elif outcome is Outcome.RETRY and decision.event.attempt < self.max_attempts:
            self._retry(consumer, message, decision, properties, headers, routing_key)
        else:
            attempts = decision.event.attempt if decision.event else 1
            self._dead_letter(consumer, message, decision, properties, headers, routing_key, attempts)
            return Outcome.DEAD_LETTER
        return outcome

    def _retry(self, consumer, message, decision: Decision, properties, headers, routing_key) -> None:
        attempt = decision.event.attempt
        delay = broker.retry_delay_for(attempt)
        target = broker.retry_queue_name(consumer, delay) if self._confirms else queue_name(consumer)
        retry_headers = {
            **headers,
            ATTEMPT_HEADER: attempt + 1,
            "x-first-failed-at": headers.get("x-first-failed-at") or timezone.now().isoformat(),
            "x-last-error": decision.error[:500],
            "x-original-routing-key": headers.get("x-original-routing-key") or routing_key,
        }
        envelope = Envelope(
            message_id=str(properties.get("message_id")),
            exchange="",
            routing_key=target,
            body=raw_body(message),
            correlation_id=str(properties.get("correlation_id") or ""),
            headers=retry_headers,
        )
        try:
            result = self._retry_publisher.publish([envelope])
        except Exception:
            message.requeue()
            raise
        if result.failed:
            message.requeue()
            raise RetryNotPublished(result.failed[envelope.message_id])
        logger.warning(
            "handler failed, retry %d of %d in %.1fs: %s", attempt, self.max_attempts - 1, delay, decision.error
        )
        message.ack()

    def _dead_letter(self, consumer, message, decision: Decision, properties, headers, routing_key, attempts) -> None:
        first_failed = headers.get("x-first-failed-at")
        try:
            dead_letter_record(
                consumer=consumer,
                body=raw_body(message),
                properties=properties,
                headers=headers,
                routing_key=routing_key,
                reason=decision.reason,
                error=decision.error,
                traceback=decision.traceback,
                attempts=attempts,
                first_failed_at=_parse_time(first_failed),
            )
        except DatabaseError:
            if self._confirms:
                # The broker keeps it in <queue>_dlq until the database is back.
                message.reject(requeue=False)
                raise DatabaseDown("could not store a dead letter") from None
            message.requeue()
            raise DatabaseDown("could not store a dead letter") from None
        message.ack()

    def _on_dead_lettered(self, consumer: str, message) -> None:
        """A message RabbitMQ dead-lettered (delivery limit, reject): move it to the table."""
        self._last_delivery = time.monotonic()
        headers = dict(message.headers or {})
        properties = {k: v for k, v in message.properties.items() if k != "application_headers"}
        deaths = headers.get("x-death") or []
        death = deaths[0] if deaths else {}
        reason = str(death.get("reason") or "dead_lettered")
        original_key = (death.get("routing-keys") or [message.delivery_info.get("routing_key", "")])[0]
        try:
            dead_letter_record(
                consumer=consumer,
                body=raw_body(message),
                properties=properties,
                headers=headers,
                routing_key=original_key,
                reason=f"broker_{reason}",
                error=f"RabbitMQ dead-lettered it from {death.get('queue', queue_name(consumer))}: {reason}",
                attempts=int(death.get("count") or 1),
            )
        except DatabaseError:
            message.requeue()
            raise DatabaseDown("could not store a dead letter") from None
        message.ack()


def raw_body(message) -> bytes:
    """The body as bytes: py-amqp hands over a str when it could decode the content encoding."""
    body = message.body
    return body.encode(message.content_encoding or "utf-8") if isinstance(body, str) else bytes(body)


def _parse_time(value):
    return parse_datetime(str(value)) if value else None
