"""A consumer's batch, from its decisions to its settling: each delivery acked, retried through
a delay queue or dead-lettered, one ack with ``multiple`` for the batch where it can
(``reliable_messaging._consumer`` describes the whole); and a delivery read off its message.

Before a batch is decided, what must not be attempted yet is sent back to wait, unattempted (no
transaction, no attempt spent): a retry back before its time (it hops on along the delay ladder,
``reliable_messaging._broker``), and a message whose handler's breaker is open (it waits for the
cool-down: ``reliable_messaging._breaker``). While a breaker is half-open one message of its
handler is tried; the others are kept for the next batch, which comes once the trial is decided.

Retries follow the failed handler's own policy (its declaration's ``attempts`` and ``delays``,
else the settings'): here is the one place a failure becomes a retry or a dead letter."""

import logging
import time
from contextlib import nullcontext
from typing import Any

import structlog
from amqp.serialization import dumps as amqp_encoded
from django.utils import timezone
from kombu.message import Message
from opentelemetry.trace import Span

from reliable_messaging import _broker as broker
from reliable_messaging import _metrics as metrics
from reliable_messaging import _telemetry as telemetry
from reliable_messaging._amqp_properties import COMPRESSED, OVERSIZED, UNDECODABLE, bounded
from reliable_messaging._breaker import Breakers
from reliable_messaging._conf import queue_name
from reliable_messaging._dead_letters import Failed
from reliable_messaging._declarations import HandlerPolicy
from reliable_messaging._dispatch import Decision, Delivery, Outcome, decide_batch
from reliable_messaging._edge import instant_within_window
from reliable_messaging._envelope import ATTEMPT_HEADER, Envelope
from reliable_messaging._faults import fault_point
from reliable_messaging._heartbeat import HandlerHeartbeat
from reliable_messaging._lifecycle import Stopper, drop_broken_db_connections
from reliable_messaging._publisher import BatchPublisher
from reliable_messaging._registry import handler_for
from reliable_messaging._session import BrokerSession

# The worker's records keep the name they had before this module was cut out of consumer.
logger = logging.getLogger("reliable_messaging.consumer")
# The filesystem broker has no TTL: a batch of waiting messages only, sent back to the end of
# their queue, is followed by this pause, or they would go round as fast as the disk allows.
FILESYSTEM_WAIT_PAUSE = 0.05
# Markers of a delivery whose body or properties did not arrive whole: never sent back to wait
# (what would be sent is not the message), decided at once (a dead letter).
_NOT_WHOLE = (OVERSIZED, UNDECODABLE, COMPRESSED)


class DatabaseDown(Exception):
    """The database cannot be reached: stop consuming until it is back."""


class RetryNotPublished(Exception):
    """The broker did not take a retry; the original is requeued instead."""


class BatchSettling:
    """``ConsumerWorker``'s batches: decided, then every delivery settled; every ack, requeue and
    reject goes through here. A part of the worker, whose state it shares (set by its
    ``__init__`` and its connection); the worker's ``_dead_letter`` stores a dead letter."""

    session: BrokerSession
    stopper: Stopper
    _breakers: Breakers
    _heartbeat: HandlerHeartbeat | None
    _retry_publisher: BatchPublisher | None
    _arrived: list[tuple[str, Message]]
    _unsettled: set[int]

    def _store_dead_letters(self, dead: list[tuple[Message, Failed]]) -> None:
        raise NotImplementedError  # the worker's: it stores the batch's dead letters together

    def _handle_batch(self) -> None:
        arrived, self._arrived = self._arrived, []
        # A handler's error may have broken any connection of the process (any alias):
        # replace broken ones now, or every later message would fail on them until a restart.
        drop_broken_db_connections()
        started = time.monotonic()
        batch = telemetry.batch_span(consumers=sorted({c for c, _ in arrived}), size=len(arrived))
        deliveries = [delivery_of(consumer, message, batch) for consumer, message in arrived]
        unended = {id(d.span): d.span for d in deliveries if d.span is not None}  # delivery_of gives each one
        try:
            attempted = self._hold_back(arrived, deliveries, unended)
            if not attempted:
                return
            arrived = [arrived[i] for i in attempted]
            deliveries = [deliveries[i] for i in attempted]
            with self._heartbeat.handling() if self._heartbeat else nullcontext():
                with telemetry.current(batch) if batch is not None else nullcontext():
                    decisions = decide_batch(deliveries)
            if any(d.outcome is Outcome.DATABASE_DOWN for d in decisions):
                for _, message in arrived:
                    self._requeue(message)
                self._count(deliveries, ["database_down"] * len(deliveries), started)
                raise DatabaseDown(next(d.error for d in decisions if d.outcome is Outcome.DATABASE_DOWN))
            self._note_in_breakers(deliveries, decisions)
            outcomes: list[Outcome] = []
            to_ack: list[Message] = []
            dead: list[tuple[Message, Failed]] = []  # stored together after the loop, then acked with the rest
            for (consumer, message), delivery, decision in zip(arrived, deliveries, decisions, strict=True):
                with structlog.contextvars.bound_contextvars(**log_context(delivery)):
                    outcome = self._settle_failure(consumer, message, delivery, decision, dead)
                    outcomes.append(outcome)
                    telemetry.end_with_outcome(
                        unended.pop(id(delivery.span)), outcome=outcome.value, reason=decision.reason,
                        error=decision.error,
                    )  # fmt: skip
                    if decision.outcome in (Outcome.HANDLED, Outcome.DUPLICATE):
                        logger.info("handled" if decision.outcome is Outcome.HANDLED else "duplicate: already handled, "
                                    "acked without effect")  # fmt: skip
                        to_ack.append(message)
            if dead:
                try:
                    self._store_dead_letters(dead)
                except DatabaseDown:
                    self._ack(to_ack)  # handled and committed: only the dead letters go back
                    raise
            for consumer in sorted({consumer for consumer, _ in arrived}):
                fault_point(f"consumer.{consumer}.before_ack")
            self._ack(to_ack + [message for message, _ in dead])
            self._count(deliveries, [o.value for o in outcomes], started)
            metrics.consumer_batch(len(arrived))
        finally:
            # Whatever stopped the batch (the database, the broker), its spans end, as errors.
            for span in unended.values():
                telemetry.end_with_outcome(span, outcome="database_down", reason="interrupted")
            if batch is not None:
                batch.end()

    def _hold_back(
        self, arrived: list[tuple[str, Message]], deliveries: list[Delivery], unended: dict[int, Span]
    ) -> list[int]:
        """Send back to wait what must not be attempted yet, keep a half-open handler's messages
        beyond its trial for the next batch; the indexes of the deliveries to decide now."""
        now, attempted, trials, kept = time.time(), list[int](), set[tuple[str, str]](), list[int]()
        for i, ((consumer, message), delivery) in enumerate(zip(arrived, deliveries, strict=True)):
            if any(marker in delivery.headers for marker in _NOT_WHOLE) or not delivery.properties.get("message_id"):
                attempted.append(i)
                continue
            until, reason = broker.waiting_until(delivery.headers, now), "waiting"
            breaker = self._breakers.of(consumer, delivery.headers.get("event_type"))
            if until is None and breaker is not None:
                until, reason = breaker.waiting_until(now), "breaker"
                if until is None and breaker.half_open(now):
                    key = (consumer, breaker.handler)
                    if key in trials:
                        kept.append(i)
                        continue
                    trials.add(key)
            if until is None:
                attempted.append(i)
                continue
            with structlog.contextvars.bound_contextvars(**log_context(delivery)):
                headers = resent_headers(delivery.headers, {})
                self._send_to_wait(consumer, message, delivery, headers=headers, until=until)
                logger.debug("not attempted yet: waits until %s (%s)", until, reason)
            metrics.consumer_wait(consumer, reason)
            telemetry.end_with_outcome(unended.pop(id(delivery.span)), outcome="waiting", reason=reason)
        for i in kept:
            telemetry.end_with_outcome(unended.pop(id(deliveries[i].span)), outcome="kept", reason="breaker_trial")
        self._arrived[:0] = [arrived[i] for i in kept]  # before anything taken since: they came first
        if not attempted and not kept and not self.session.amqp:
            self.stopper.sleep(FILESYSTEM_WAIT_PAUSE)
        return attempted

    def _note_in_breakers(self, deliveries: list[Delivery], decisions: list[Decision]) -> None:
        now = time.time()
        for delivery, decision in zip(deliveries, decisions, strict=True):
            breaker = self._breakers.of(delivery.consumer, delivery.headers.get("event_type"))
            if breaker is None:
                continue
            if decision.outcome is Outcome.HANDLED:
                breaker.succeeded()
            elif decision.transient:
                breaker.failed(now)

    def _settle_failure(
        self, consumer: str, message: Message, delivery: Delivery, decision: Decision,
        dead: list[tuple[Message, Failed]],
    ) -> Outcome:  # fmt: skip
        """Retry a failed message (its ack comes with that) or add it to ``dead``, the batch's dead
        letters, by its handler's policy; what was done."""
        outcome, event = decision.outcome, decision.event
        if outcome in (Outcome.HANDLED, Outcome.DUPLICATE):
            return outcome
        spec = handler_for(consumer, event.event_type) if event is not None else None
        policy = spec.policy if spec is not None else HandlerPolicy()
        breaker = self._breakers.of(consumer, event.event_type) if event is not None else None
        if decision.transient and event is not None and breaker is not None:
            if (until := breaker.waiting_until(time.time())) is not None:
                # Its breaker is open now (this failure opened it, or a trial failed): the message waits
                # out the cool-down with the others, its attempt unspent, however long the outage lasts.
                headers = retry_headers(delivery.headers, event.attempt - 1, decision.error, delivery.routing_key)
                self._send_to_wait(consumer, message, delivery, headers=headers, until=until)
                logger.warning("handler failed with its breaker open again: waits %.1fs, attempt %d unspent: %s",
                               until - time.time(), event.attempt, decision.error)  # fmt: skip
                return Outcome.RETRY
        # A retry always has its event (a message refused before it was read is a dead letter at once).
        if outcome is Outcome.RETRY and event is not None and event.attempt < policy.max_attempts():
            self._retry(consumer, message, delivery, decision, event.attempt, policy)
            return Outcome.RETRY
        dead.append((message, dead_letter_of(consumer, delivery, decision)))
        return Outcome.DEAD_LETTER

    def _count(self, deliveries: list[Delivery], outcomes: list[str], started: float) -> None:
        seconds = (time.monotonic() - started) / max(1, len(deliveries))
        for delivery, outcome in zip(deliveries, outcomes, strict=True):
            metrics.consumer_message(
                delivery.consumer, str(delivery.headers.get("event_type") or "-"), outcome, seconds
            )

    # --- settling: every ack, requeue and reject goes through here -----------------------------
    def _ack(self, messages: list[Message]) -> None:
        if not messages:
            return
        tags = {m.delivery_tag for m in messages}
        last = max(messages, key=lambda m: m.delivery_tag)
        if self.session.amqp and len(messages) > 1 and {t for t in self._unsettled if t <= last.delivery_tag} == tags:
            last.ack(multiple=True)
            self._unsettled -= tags
            return
        for message in messages:
            message.ack()
            self._unsettled.discard(message.delivery_tag)

    def _requeue(self, message: Message) -> None:
        message.requeue()
        self._unsettled.discard(message.delivery_tag)

    def _reject(self, message: Message) -> None:
        message.reject(requeue=False)
        self._unsettled.discard(message.delivery_tag)

    def _retry(
        self,
        consumer: str,
        message: Message,
        delivery: Delivery,
        decision: Decision,
        attempt: int,
        policy: HandlerPolicy,
    ) -> None:
        delay = policy.delay_after(attempt)
        headers = retry_headers(delivery.headers, attempt, decision.error, delivery.routing_key)
        self._send_to_wait(consumer, message, delivery, headers=headers, until=time.time() + delay)
        logger.warning("handler failed, retry %d of %d in %.1fs: %s", attempt, policy.max_attempts() - 1, delay,
                       decision.error)  # fmt: skip

    def _send_to_wait(
        self, consumer: str, message: Message, delivery: Delivery, *, headers: dict[str, Any], until: float
    ) -> None:
        """Send a delivery back, with ``headers``, to wait until ``until`` (epoch seconds): into the
        delay ladder's step that does not outlast the wait (RabbitMQ), or to the end of its queue
        (the filesystem broker has no TTL); confirmed, then acked. Requeued when the broker does
        not take it."""
        step = broker.delay_step(until - time.time())
        envelope = Envelope(
            message_id=str(delivery.properties.get("message_id")),
            exchange="",
            routing_key=broker.retry_queue_name(consumer, step) if self.session.amqp else queue_name(consumer),
            body=delivery.body,
            correlation_id=str(delivery.properties.get("correlation_id") or ""),
            headers={**headers, **broker.wait_until_header(until)},
        )
        try:
            if self._retry_publisher is None:  # the worker opens it with its connection
                raise RuntimeError("no retry publisher: the worker is not connected")
            result = self._retry_publisher.publish([envelope])
        except Exception:
            self._requeue(message)
            raise
        if result.failed:
            self._requeue(message)
            raise RetryNotPublished(result.failed[envelope.message_id])
        self._ack([message])


# Headers of a failed delivery, not of the event: RabbitMQ writes its own again when the retry's
# delay expires; carried over, x-death grows at every retry (one entry per delay queue).
_DELIVERY_HEADERS = frozenset(
    ("x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason", "x-delivery-count")
)
# What a retry carries of the headers it arrived with, at most (AMQP-encoded): far below
# RabbitMQ's frame_max (128 KiB), which a content header must fit in or the broker closes the
# connection, at every attempt of the message.
RETRY_HEADERS_BYTES = 16 * 1024


def retry_headers(headers: dict[str, Any], attempt: int, error: str, routing_key: str) -> dict[str, Any]:
    """The headers of a retry, its ``attempt``-th having failed with ``error`` (``resent_headers``)."""
    first, original = headers.get("x-first-failed-at"), headers.get("x-original-routing-key")
    own = {
        ATTEMPT_HEADER: attempt + 1,
        "x-first-failed-at": first if isinstance(first, str) and 0 < len(first) <= 64 else timezone.now().isoformat(),
        "x-last-error": error[:500],
        "x-original-routing-key": original if isinstance(original, str) and 0 < len(original) <= 255 else routing_key,
    }
    return resent_headers(headers, own)


def resent_headers(headers: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """The headers of a delivery sent back to its queue: the bus's ``own`` replaced (never
    appended to), RabbitMQ's of the delivery left out, and the others kept while they fit
    ``RETRY_HEADERS_BYTES``, the largest left out first."""
    carried = {k: v for k, v in headers.items() if k not in own and k not in _DELIVERY_HEADERS}
    sizes = {name: _encoded_size(name, value) for name, value in carried.items()}
    room = RETRY_HEADERS_BYTES - sum(_encoded_size(name, value) for name, value in own.items())
    total, left_out = sum(sizes.values()), list[str]()
    for name in sorted(sizes, key=sizes.__getitem__, reverse=True):
        if total <= room:
            break
        left_out.append(name)
        total -= sizes[name]
        del carried[name]
    if left_out:
        logger.warning(
            "a retry leaves out %d headers over %d bytes: %s", len(left_out), RETRY_HEADERS_BYTES, left_out[:5]
        )
    return {**carried, **own}


def _encoded_size(name: str, value: object) -> int:
    try:
        return len(amqp_encoded("F", [{name: value}]))
    except Exception:  # noqa: BLE001 - a value AMQP cannot encode is left out
        return RETRY_HEADERS_BYTES + 1


def dead_letter_of(consumer: str, delivery: Delivery, decision: Decision) -> Failed:
    first_failed = delivery.headers.get("x-first-failed-at")
    return Failed(
        consumer=consumer,
        body=delivery.body,
        properties=delivery.properties,
        # The wait of its last retry, not the message's: past, and meaningless to a replay.
        headers={k: v for k, v in delivery.headers.items() if k != broker.WAIT_HEADER},
        routing_key=delivery.routing_key,
        reason=decision.reason,
        error=decision.error,
        traceback=decision.traceback,
        attempts=decision.event.attempt if decision.event else 1,
        first_failed_at=instant_within_window(first_failed),
        refused=decision.refused,
    )


def delivery_of(consumer: str, message: Message, batch: Span | None = None) -> Delivery:
    """The delivery, with its CONSUMER span started (a child of the context the message carries)."""
    properties = {k: v for k, v in message.properties.items() if k != "application_headers"}
    # Over MAX_MESSAGE_BYTES: a prefix, marked, for the dead letter (never decoded nor parsed).
    body, headers = bounded(raw_body(message), dict(message.headers or {}))
    routing_key = message.delivery_info.get("routing_key", "")
    span = telemetry.consumer_span(
        headers=headers,
        consumer=consumer,
        event_type=str(headers.get("event_type") or routing_key),
        exchange=message.delivery_info.get("exchange") or "amq.default",
        routing_key=routing_key,
        message_id=str(properties.get("message_id") or ""),
        correlation_id=str(properties.get("correlation_id") or ""),
        batch=batch,
    )
    return Delivery(
        consumer=consumer,
        body=body,
        properties=properties,
        headers=headers,
        routing_key=routing_key,
        span=span,
    )


def log_context(delivery: Delivery) -> dict[str, str]:
    return {
        "consumer": delivery.consumer,
        "message_id": str(delivery.properties.get("message_id") or "-"),
        "event_type": str(delivery.headers.get("event_type") or "-"),
        "correlation_id": str(delivery.properties.get("correlation_id") or "-"),
        "trace_id": "-",
        **(telemetry.ids_of(delivery.span) if delivery.span is not None else {}),
    }


def raw_body(message: Message) -> bytes:
    """The body as bytes: py-amqp hands over a str when it could decode the content encoding."""
    body = message.body
    return body.encode(message.content_encoding or "utf-8") if isinstance(body, str) else bytes(body)
