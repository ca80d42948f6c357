"""Broker connections and the topology (seed 000), declared idempotently by relay and consumers.

Every process declares the whole topology of ``messaging.topology``, not only what its deployment
hosts, so deployments can start in any order. Per consumer ``C`` there:

- ``C_queue``: quorum queue bound to ``ecommerce_events`` with exactly the keys C handles.
  Its dead-letter exchange ``C_queue_dlx`` (fanout) feeds ``C_queue_dlq``; ``x-delivery-limit``
  is the last guard against a message that kills the consumer on every delivery.
- ``C_queue_retry_<ms>ms``: one delay queue per retry delay, each with a fixed TTL (a
  per-message TTL would wait behind older messages). Expired messages go back through the
  default exchange to ``C_queue`` only, never through the topic exchange.

Queue arguments cannot change once declared, and every deployment declares every queue: the
settings behind them (``CONSUMER_DELIVERY_LIMIT``, ``CONSUMER_RETRY_DELAYS``) must be the same
in every deployment, or RabbitMQ refuses the declaration (406). A different delay gets a new
queue name.
"""

import logging

from django.conf import settings
from kombu import Connection, Exchange, Queue, binding

from messaging.conf import exchange_name, queue_name, setting
from messaging.topology import queue_bindings

logger = logging.getLogger(__name__)


def connect() -> Connection:
    """A new, not yet connected, broker connection for ``BROKER_URL``."""
    url = settings.BROKER_URL
    if url.startswith("filesystem"):
        # Every process must share the same absolute folders for topic routing to work.
        root = setting("FILESYSTEM_DIR")
        data, control = root / "data", root / "control"
        data.mkdir(parents=True, exist_ok=True)
        control.mkdir(parents=True, exist_ok=True)
        # A hostname of its own: kombu warns "No hostname was supplied" without one.
        return Connection(
            transport="filesystem",
            hostname="localhost",
            transport_options={
                "data_folder_in": str(data),
                "data_folder_out": str(data),
                "control_folder": str(control),
                "polling_interval": 0.05,
            },
        )
    return Connection(url, heartbeat=settings.BROKER_HEARTBEAT, connect_timeout=5)


def describe(connection: Connection) -> str:
    """A connection for a log line: the filesystem broker's folder, or the URL without its password."""
    if connection.transport_cls == "filesystem":
        return f"filesystem://{setting('FILESYSTEM_DIR')}"
    return connection.as_uri()


def supports_confirms(connection: Connection) -> bool:
    """Only a real AMQP broker confirms, returns and dead-letters."""
    return connection.transport.driver_type == "amqp"


def events_exchange() -> Exchange:
    return Exchange(exchange_name(), type="topic", durable=True)


def retry_queue_name(consumer: str, delay_seconds: float) -> str:
    return f"{queue_name(consumer)}_retry_{int(round(delay_seconds * 1000))}ms"


def main_queue(consumer: str) -> Queue:
    name = queue_name(consumer)
    exchange = events_exchange()
    return Queue(
        name,
        bindings=[binding(exchange, routing_key=key) for key in queue_bindings()[consumer]],
        durable=True,
        queue_arguments={
            "x-queue-type": "quorum",
            "x-dead-letter-exchange": f"{name}_dlx",
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
            "x-delivery-limit": setting("DELIVERY_LIMIT"),
        },
    )


def dead_letter_queue(consumer: str) -> Queue:
    name = queue_name(consumer)
    return Queue(f"{name}_dlq", Exchange(f"{name}_dlx", type="fanout", durable=True), routing_key="", durable=True)


def retry_queues(consumer: str) -> list[Queue]:
    return [
        Queue(
            retry_queue_name(consumer, delay),
            durable=True,
            queue_arguments={
                "x-message-ttl": int(round(delay * 1000)),
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": queue_name(consumer),
            },
        )
        for delay in setting("CONSUMER_RETRY_DELAYS")
    ]


def retry_delay_for(attempt: int) -> float:
    """The delay before retry number ``attempt`` (1-based): the last delay repeats."""
    delays = setting("CONSUMER_RETRY_DELAYS")
    return delays[min(attempt, len(delays)) - 1]


def declare_topology(connection: Connection) -> None:
    """Declare the exchange and every queue of the system (idempotent)."""
    channel = connection.default_channel
    events_exchange()(channel).declare()
    for consumer in queue_bindings():
        dead_letter_queue(consumer)(channel).declare()
        main_queue(consumer)(channel).declare()
        if supports_confirms(connection):  # no TTL or dead-lettering on the filesystem broker
            for queue in retry_queues(consumer):
                queue(channel).declare()


def drop(connection) -> None:
    """Abandon a connection after an error: close its socket without the AMQP close handshake.

    A broker in a memory or disk alarm stops reading a publisher's socket, so the handshake
    (``connection.close`` then waiting for ``close-ok``) would hang until the alarm clears.
    """
    if connection is None:
        return
    try:
        connection.collect()
    except Exception as exc:  # noqa: BLE001 - the socket may already be gone
        logger.debug("dropping %r: %s", connection, exc)


def close_quietly(resource) -> None:
    """Close a connection or channel that may already be broken."""
    if resource is None:
        return
    try:
        resource.close()
    except Exception as exc:  # noqa: BLE001 - closing what is already gone is not an error
        logger.debug("closing %r: %s", resource, exc)
