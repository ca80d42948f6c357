"""Publishing a batch of messages and learning which of them the broker took.

On RabbitMQ the channel is in confirm mode: the whole batch is published, then the broker's
acks are awaited (one ack may cover several delivery tags). A message counts as delivered
only when it was acked and not returned: with ``mandatory`` an unroutable message is
returned *and* acked. kombu has no batched-confirm API, so this works on the py-amqp channel
underneath, which also means counting delivery tags ourselves (they restart at 1 on a new
channel, and a channel kombu re-creates is not in confirm mode). Messages go out with
py-amqp's ``basic_publish`` directly: kombu's ``Producer.publish`` costs several times more
CPU per message and adds nothing on this path (the wire format is the same).

kombu's filesystem transport has no confirms or returns: a message written is taken as
delivered (the embedded mode's documented limit).
"""

import logging
import time
from dataclasses import dataclass, field

from amqp import Message
from kombu import Connection, Producer

from messaging.broker import close_quietly, supports_confirms
from messaging.envelope import Envelope

logger = logging.getLogger(__name__)


class ConfirmTimeout(Exception):
    """The broker did not confirm the batch in time (blocked, partitioned or overloaded)."""


@dataclass
class PublishResult:
    delivered: list[str] = field(default_factory=list)  # message ids
    failed: dict[str, str] = field(default_factory=dict)  # message id -> reason


class BatchPublisher:
    """Publishes batches on one channel of ``connection``; reopen it after a connection error."""

    def __init__(self, connection: Connection, confirm_timeout: float):
        self.connection = connection
        self.confirm_timeout = confirm_timeout
        self.confirms = supports_confirms(connection)
        self._channel = None
        self._producer: Producer | None = None
        self._next_tag = 1
        self._unconfirmed: dict[int, str] = {}
        self._returned: dict[str, str] = {}
        self._nacked: set[str] = set()

    def publish(self, envelopes: list[Envelope]) -> PublishResult:
        self._open()
        self._unconfirmed.clear()
        self._returned.clear()
        self._nacked.clear()
        if self.confirms:
            basic_publish = self._channel.basic_publish
            for envelope in envelopes:
                message = Message(envelope.body, application_headers=envelope.headers, **envelope.properties)
                basic_publish(message, exchange=envelope.exchange, routing_key=envelope.routing_key, mandatory=True)
                self._unconfirmed[self._next_tag] = envelope.message_id
                self._next_tag += 1
            self._await_confirms()
        else:
            for envelope in envelopes:
                self._producer.publish(
                    envelope.body,
                    exchange=envelope.exchange,
                    routing_key=envelope.routing_key,
                    headers=envelope.headers,
                    mandatory=True,
                    timeout=self.confirm_timeout,
                    retry=False,
                    **envelope.properties,
                )
        result = PublishResult()
        for envelope in envelopes:
            reason = self._returned.get(envelope.message_id) or (
                "nacked by the broker" if envelope.message_id in self._nacked else None
            )
            if reason:
                result.failed[envelope.message_id] = reason
            else:
                result.delivered.append(envelope.message_id)
        return result

    def close(self) -> None:
        close_quietly(self._channel)
        self._channel = None
        self._producer = None

    def _open(self) -> None:
        if self._channel is not None and getattr(self._channel, "is_open", True):
            return
        channel = self.connection.channel()
        if self.confirms:
            channel.confirm_select()
            channel.events["basic_ack"].add(self._on_ack)
            channel.events["basic_nack"].add(self._on_nack)
            channel.events["basic_return"].add(self._on_return)
            self._next_tag = 1
        self._channel = channel
        self._producer = Producer(channel, auto_declare=False)

    def _await_confirms(self) -> None:
        deadline = time.monotonic() + self.confirm_timeout
        while self._unconfirmed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ConfirmTimeout(f"{len(self._unconfirmed)} messages unconfirmed after {self.confirm_timeout}s")
            try:
                self.connection.drain_events(timeout=remaining)
            except TimeoutError:
                continue

    def _settle(self, delivery_tag: int, multiple: bool) -> list[str]:
        if not multiple:
            message_id = self._unconfirmed.pop(delivery_tag, None)
            return [message_id] if message_id is not None else []
        # Tags were added in increasing order and dicts keep it: settle from the front.
        settled = []
        unconfirmed = self._unconfirmed
        while unconfirmed:
            tag = next(iter(unconfirmed))
            if tag > delivery_tag:
                break
            settled.append(unconfirmed.pop(tag))
        return settled

    def _on_ack(self, delivery_tag: int, multiple: bool) -> None:
        self._settle(delivery_tag, multiple)

    def _on_nack(self, delivery_tag: int, multiple: bool) -> None:
        self._nacked.update(self._settle(delivery_tag, multiple))

    def _on_return(self, exc, exchange, routing_key, message) -> None:
        message_id = message.properties.get("message_id", "")
        reply = getattr(exc, "reply_text", exc)
        reason = f"returned by the broker: {reply} (exchange {exchange!r}, routing key {routing_key!r})"
        logger.warning("message returned", extra={"message_id": message_id, "event_type": routing_key})
        self._returned[message_id] = reason
