"""Looking at the bench's RabbitMQ vhost from outside: queue depths, purges, capture queues."""

import os

from kombu import Connection, Exchange, Queue

from faultlib.processes import wait_until

EXCHANGE = os.environ.get("MESSAGING_EXCHANGE", "ecommerce_events")
TOPOLOGY_QUEUES = ("orders_queue", "payments_queue", "inventory_queue", "shipping_queue", "bench_queue", "events_queue")


def connect() -> Connection:
    return Connection(os.environ["BROKER_URL"], connect_timeout=5)


def depth(queue: str) -> int:
    with connect() as conn:
        return conn.default_channel.queue_declare(queue, passive=True).message_count


def consumers(queue: str) -> int:
    with connect() as conn:
        return conn.default_channel.queue_declare(queue, passive=True).consumer_count


def purge(*queues: str) -> None:
    with connect() as conn:
        channel = conn.default_channel
        for queue in queues or TOPOLOGY_QUEUES:
            try:
                channel.queue_purge(queue)
            except conn.channel_errors:  # not declared yet
                channel = conn.channel()


def bind(queue: str, routing_key: str) -> None:
    with connect() as conn:
        conn.default_channel.queue_bind(queue, EXCHANGE, routing_key)


def capture_queue(name: str, routing_key: str) -> None:
    """A plain classic queue of the bench's own, bound to the events exchange."""
    with connect() as conn:
        Queue(name, Exchange(EXCHANGE, type="topic", durable=True), routing_key=routing_key, durable=False)(
            conn.default_channel
        ).declare()


def delete(name: str) -> None:
    with connect() as conn:
        conn.default_channel.queue_delete(name)


def wait_depth(queue: str, count: int, timeout: float) -> None:
    wait_until(lambda: depth(queue) >= count, timeout=timeout, message=f"{queue} to hold {count} messages")
