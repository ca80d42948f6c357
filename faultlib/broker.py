"""Looking at the test vhost of RabbitMQ from the outside: capture queues and purges."""

import uuid

import amqp
from django.conf import settings
from kombu import Connection, Exchange, Queue
from reliable_messaging.testing import topology_queues

from faultlib.invariants import broker_queue_depths


def connection() -> Connection:
    return Connection(settings.BROKER_URL, connect_timeout=5)


def purge_topology() -> None:
    """Empty every queue of the topology, so a test starts with a quiet broker: the declared ones,
    and the delay queues of delays this process does not know (a test that ran its consumers with
    other CONSUMER_RETRY_DELAYS leaves retries there that would arrive in the next test)."""
    with connection() as conn:
        queues = topology_queues(conn)
        channel = conn.default_channel
        prefixes, declared = [], set()
        for main, *others in queues.values():
            prefixes.append(f"{main.name}_")
            for queue in [main, *others]:
                queue(channel).purge()
                declared.add(queue.name)
        # Delay queues of delays this process does not declare are deleted, not purged: a retry
        # another test left there (its count read 0 here) arrived in the next test otherwise.
        for name in broker_queue_depths() or {}:
            if name.startswith(tuple(prefixes)) and name not in declared:
                channel.queue_delete(name)


class CaptureQueue:
    """A queue of the test's own, bound to the exchange, to count what really arrives."""

    def __init__(self, binding_key: str = "#", exchange: str | None = None, url: str | None = None):
        self.name = f"test_capture_{uuid.uuid4().hex[:10]}"
        self.exchange = Exchange(exchange or settings.MESSAGING["EXCHANGE"], type="topic", durable=True)
        self.binding_key = binding_key
        self.url = url  # a broker of the test's own; the run's by default
        with self.connection() as conn:
            self._queue(conn).declare()

    def connection(self) -> Connection:
        return Connection(self.url, connect_timeout=5) if self.url else connection()

    def _queue(self, conn):
        return Queue(self.name, self.exchange, routing_key=self.binding_key, durable=True)(conn.default_channel)

    def count(self) -> int:
        with self.connection() as conn:
            return self._queue(conn).queue_declare(passive=True).message_count

    def drain(self) -> list:
        """Take every message out of the queue: (message_id, headers, body) triples."""
        messages = []
        with self.connection() as conn:
            queue = self._queue(conn)
            while (message := queue.get(no_ack=True)) is not None:
                messages.append((message.properties.get("message_id"), dict(message.headers or {}), message.body))
        return messages

    def delete(self) -> None:
        with self.connection() as conn:
            self._queue(conn).delete()


def publish_raw(
    routing_key: str, body: bytes, *, properties: dict | None = None, headers: dict | None = None, exchange=None
):
    """Publish a message as an outsider would, with any properties (or none)."""
    with connection() as conn:
        producer = conn.Producer()
        producer.publish(
            body,
            exchange=exchange if exchange is not None else settings.MESSAGING["EXCHANGE"],
            routing_key=routing_key,
            headers=headers or {},
            content_type="application/json",
            content_encoding="utf-8",
            delivery_mode=2,
            **(properties or {}),
        )


def publish_exact(
    routing_key: str, body: bytes, *, exchange: str = "", headers: dict | None = None, **properties
) -> None:
    """Publish through py-amqp itself, with exactly the header types given (a str, a list, a
    2^40): no client in between normalises them. Confirmed, so the message is in its queue when
    this returns."""
    params = Connection(settings.BROKER_URL.split(";")[0])
    with amqp.Connection(
        f"{params.hostname}:{params.port or 5672}",
        userid=params.userid,
        password=params.password,
        virtual_host=params.virtual_host,
        connect_timeout=5,
    ) as conn:
        message = amqp.Message(body, application_headers=headers or {}, delivery_mode=2, **properties)
        conn.channel().basic_publish_confirm(
            message, exchange=exchange, routing_key=routing_key, mandatory=True, confirm_timeout=10
        )
