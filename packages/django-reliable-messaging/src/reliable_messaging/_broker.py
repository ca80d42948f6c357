"""Broker connections and the topology (seed 000), declared idempotently by relay and consumers.

Every process declares the whole topology of ``reliable_messaging._topology``, not only what its deployment
hosts, so deployments can start in any order. Per consumer ``C`` there:

- ``C_queue``: quorum queue bound to ``ecommerce_events`` with exactly the keys C handles.
  Its dead-letter exchange ``C_queue_dlx`` (fanout) feeds ``C_queue_dead_letters``;
  ``x-delivery-limit`` is the last guard against a message that kills the consumer on every
  delivery.
- ``C_queue_delay_<ms>ms``: the delay ladder, one queue per step of ``DELAY_LADDER`` (0.1 s to an
  hour), each with a fixed TTL (a per-message TTL would wait behind older messages: RabbitMQ
  expires only at the head of a queue). Expired messages go back through the default exchange
  to ``C_queue`` only, never through the topic exchange.

A message that waits (a retry for its handler's delay, a message whose handler's breaker is open)
carries until when (``WAIT_HEADER``) and goes to the longest step of the ladder that does not
outlast it; back in ``C_queue`` before its time, the consumer sends it on to the next step,
unattempted, until it is due (``waiting_until``). So any wait is a few hops of fixed queues: the
ladder is the package's, the same for every deployment, and no retry policy is a queue argument
(deployments of other policies share a broker; a policy changes with a rolling restart, and a
message in flight keeps the wait it was given). The filesystem broker has no TTL: there a
waiting message goes back to the end of its queue until it is due.

Every queue is a quorum queue, so on a cluster each has a member on every node and survives the
loss of any one of them (a classic queue lives on one node: while that node is down, it and
every declaration of it fail with ``NOT_FOUND``). Since RabbitMQ 3.10 quorum queues take a
message TTL, and they dead-letter at-least-once with ``x-overflow=reject-publish`` (at-most-once
otherwise: an expired retry could be lost if a leader died while moving it).

Queue arguments, and a queue's type, cannot change once declared, and every deployment declares
every queue: the one setting behind them (``DELIVERY_LIMIT``) must be the same in every
deployment, or RabbitMQ refuses the declaration (406). A delay queue's name says its TTL, so one
name always has the same arguments: the releases before the ladder declared a queue per
``CONSUMER_RETRY_DELAYS`` value (the default 1 s, 5 s and 30 s are steps of the ladder); what they
hold still expires back into ``C_queue``. The releases before the cluster work had classic ``C_queue_dlq``
and ``C_queue_retry_<ms>ms`` queues (``legacy_*`` below); ``reliable_messaging._queue_upgrade`` drains and
removes them (``manage.py upgrade_broker_queues``).
"""

import logging
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from kombu import Connection, Exchange, Queue, binding
from kombu.exceptions import OperationalError

from reliable_messaging import _filesystem_transport as filesystem_transport
from reliable_messaging._conf import MAX_WAIT_SECONDS, exchange_name, folder, queue_name, setting
from reliable_messaging._edge import plain_int
from reliable_messaging._registry import local_consumers
from reliable_messaging._topology import queue_bindings

logger = logging.getLogger("reliable_messaging.broker")

# Node URL -> when a connection of this process to it last failed. A frozen node accepts TCP
# connections and never answers: trying it first again would cost a connect timeout each time.
_failed_at: dict[str, float] = {}


def node_urls() -> list[str]:
    """The nodes of ``BROKER_URL`` in the order to try them: as configured, except that the nodes
    this process last lost a connection to come last (the most recent last)."""
    urls = setting("BROKER_URL").split(";")
    return sorted(urls, key=lambda url: _failed_at.get(url, 0.0))  # stable: untouched nodes keep their order


def note_failure(connection: Connection | None) -> None:
    """The node ``connection`` is on failed: try the others first from now on."""
    if connection is None or not connection.alt:
        return
    for url in connection.alt:
        parts = urlsplit(url)
        if (parts.hostname, parts.port or 5672) == (connection.hostname, connection.port or 5672):
            _failed_at[url] = time.monotonic()
            return


def connect() -> Connection:
    """A new, not yet connected, broker connection for ``BROKER_URL``."""
    url = setting("BROKER_URL")
    if url.startswith("filesystem"):
        # Every process must share the same absolute folders for topic routing to work.
        root = folder("FILESYSTEM_DIR")
        data, control = root / "data", root / "control"
        data.mkdir(parents=True, exist_ok=True)
        control.mkdir(parents=True, exist_ok=True)
        # A hostname of its own: kombu warns "No hostname was supplied" without one.
        return Connection(
            transport=filesystem_transport.Transport,
            hostname="localhost",
            transport_options={
                "data_folder_in": str(data),
                "data_folder_out": str(data),
                "control_folder": str(control),
                "polling_interval": 0.05,
            },
        )
    return Connection(";".join(node_urls()), heartbeat=setting("BROKER_HEARTBEAT"), connect_timeout=5)


def node_count(connection: Connection) -> int:
    """How many nodes ``BROKER_URL`` names (``amqp://..:5701/vh;amqp://..:5702/vh;..``): 1 or more."""
    return max(1, len(connection.alt))


def connect_to_a_node(connection: Connection) -> Connection:
    """Connect to the first node of ``BROKER_URL`` that answers, trying each once, in order.

    kombu's own ``connect()`` tries two nodes at most and wraps errors in its own types; each
    node here gets one attempt of ``connect_timeout`` (a refused connection fails at once, a
    frozen node after the timeout), and the last node's error is raised as the transport's
    own, which the loops recognise as "broker unavailable" and retry with backoff.
    """
    connected: Connection = connection.ensure_connection(
        max_retries=node_count(connection) - 1, interval_start=0, interval_step=0, reraise_as_library_errors=False
    )
    return connected


def describe(connection: Connection) -> str:
    """A connection for a log line: the filesystem broker's folder, or the URL without its password."""
    if connection.transport.driver_type == "filesystem":
        return f"filesystem://{setting('FILESYSTEM_DIR')}"
    return connection.as_uri()


def supports_confirms(connection: Connection) -> bool:
    """Only a real AMQP broker confirms, returns and dead-letters."""
    return bool(connection.transport.driver_type == "amqp")


def events_exchange(*, declare: bool = True) -> Exchange:
    return Exchange(exchange_name(), type="topic", durable=True, no_declare=not declare)


# Replicated on every node, at-least-once dead-lettering (needs reject-publish): see above.
QUORUM = {"x-queue-type": "quorum"}
AT_LEAST_ONCE_DEAD_LETTERING = {"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"}


def _milliseconds(delay_seconds: float) -> int:
    return int(round(delay_seconds * 1000))


def retry_queue_name(consumer: str, delay_seconds: float) -> str:
    return f"{queue_name(consumer)}_delay_{_milliseconds(delay_seconds)}ms"


def dead_letter_queue_name(consumer: str) -> str:
    return f"{queue_name(consumer)}_dead_letters"


def dead_letter_exchange(consumer: str) -> Exchange:
    return Exchange(f"{queue_name(consumer)}_dlx", type="fanout", durable=True)


def legacy_retry_queue_name(consumer: str, delay_seconds: float) -> str:
    """The classic delay queue of the releases before the cluster work."""
    return f"{queue_name(consumer)}_retry_{_milliseconds(delay_seconds)}ms"


def legacy_dead_letter_queue_name(consumer: str) -> str:
    """The classic dead-letter queue of the releases before the cluster work."""
    return f"{queue_name(consumer)}_dlq"


def main_queue(consumer: str) -> Queue:
    name = queue_name(consumer)
    # Bound, never declared with the queue (``declare_topology`` declares it first): a context's
    # own broker user may not configure the exchange.
    exchange = events_exchange(declare=False)
    return Queue(
        name,
        bindings=[binding(exchange, routing_key=key) for key in queue_bindings()[consumer]],
        durable=True,
        queue_arguments={
            **QUORUM,
            "x-dead-letter-exchange": f"{name}_dlx",
            **AT_LEAST_ONCE_DEAD_LETTERING,
            "x-delivery-limit": setting("DELIVERY_LIMIT"),
        },
    )


def dead_letter_queue(consumer: str) -> Queue:
    return Queue(
        dead_letter_queue_name(consumer),
        dead_letter_exchange(consumer),
        routing_key="",
        durable=True,
        queue_arguments=QUORUM,
    )


# The delay ladder (seconds): never a setting, so that every deployment declares the same queues.
DELAY_LADDER = (0.1, 1.0, 5.0, 30.0, 300.0, 3600.0)
# Until when a message waits, in milliseconds since the epoch (a retry's or a paused handler's).
WAIT_HEADER = "x-wait-until-ms"
# A message this close to its time is due: it would otherwise hop once more, for a step longer.
DUE_WITHIN = DELAY_LADDER[0] / 2


def waiting_until(headers: dict[str, Any], now: float) -> float | None:
    """Until when (epoch seconds) a message waits still, or None when it is due. A header that is
    no integer, or further ahead than a wait may be declared, is no wait of the bus's: not honoured."""
    until_ms = plain_int(headers.get(WAIT_HEADER))
    if until_ms is None or not now + DUE_WITHIN < until_ms / 1000 <= now + MAX_WAIT_SECONDS:
        return None
    return until_ms / 1000


def wait_until_header(until: float) -> dict[str, int]:
    return {WAIT_HEADER: int(until * 1000)}


# A wait may end this much later than asked (a tenth), so that one hop serves a wait just short of
# a step (a breaker's cool-down reckoned from now, say): ten hops of the step below cost far more.
STEP_SLACK = 0.1


def delay_step(wait: float) -> float:
    """The ladder's step to wait in: the longest that does not outlast ``wait`` by more than
    ``STEP_SLACK`` of it, else the shortest."""
    return max((step for step in DELAY_LADDER if step <= wait * (1 + STEP_SLACK)), default=DELAY_LADDER[0])


def retry_queues(consumer: str) -> list[Queue]:
    return [
        Queue(
            retry_queue_name(consumer, delay),
            durable=True,
            queue_arguments={
                **QUORUM,
                "x-message-ttl": _milliseconds(delay),
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": queue_name(consumer),
                **AT_LEAST_ONCE_DEAD_LETTERING,
            },
        )
        for delay in DELAY_LADDER
    ]


def declare_topology(connection: Connection, *, whole: bool = False) -> None:
    """Declare the exchange and every queue of the system (idempotent).

    With a broker user per context (``BROKER_PRODUCERS``), a user may configure only its own
    queues: this deployment then declares its own consumers' queues and checks that the exchange
    exists (a passive declaration); ``manage.py broker_permissions --apply`` declares the whole
    topology beforehand as an administrator (``whole``)."""
    channel = connection.default_channel
    own_only = bool(setting("PRODUCERS")) and not whole
    events_exchange()(channel).declare(passive=own_only and supports_confirms(connection))
    for consumer in local_consumers() if own_only else queue_bindings():
        dead_letter_queue(consumer)(channel).declare()
        main_queue(consumer)(channel).declare()
        if supports_confirms(connection):  # no TTL or dead-lettering on the filesystem broker
            for queue in retry_queues(consumer):
                queue(channel).declare()


def declare_queues() -> list[str]:
    """Declare this deployment's topology now (``declare_topology``: the queues of the contexts it
    knows, its own among them), before it takes traffic; the names of the queues it declared.
    ``ConnectionError`` when the broker cannot be reached."""
    try:
        with connect() as connection:
            connect_to_a_node(connection)
            declare_topology(connection)
    except (OSError, OperationalError) as exc:
        raise ConnectionError(str(exc) or type(exc).__name__) from exc
    return [queue_name(c) for c in (local_consumers() if setting("PRODUCERS") else queue_bindings())]


def unbind_queue(consumer: str, routing_keys: Iterable[str]) -> bool:
    """Unbind ``consumer``'s queue from the exchange, one key after another: a consumer no deployment
    runs any more stops receiving events, and what its queue holds stays for an operator to read
    or purge. False when the queue does not exist. ``ConnectionError`` when the broker cannot be reached."""
    try:
        with connect() as connection:
            connect_to_a_node(connection)
            channel = connection.channel()
            try:
                channel.queue_declare(queue=queue_name(consumer), passive=True)
            except connection.channel_errors:  # never declared: nothing routes to it
                return False
            for key in routing_keys:
                channel.queue_unbind(queue=queue_name(consumer), exchange=exchange_name(), routing_key=key)
    except (OSError, OperationalError) as exc:
        raise ConnectionError(str(exc) or type(exc).__name__) from exc
    return True


def drop(connection: Connection | None) -> None:
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


def close_quietly(resource: Any) -> None:  # a kombu or amqp connection or channel
    """Close a connection or channel that may already be broken."""
    if resource is None:
        return
    try:
        resource.close()
    except Exception as exc:  # noqa: BLE001 - closing what is already gone is not an error
        logger.debug("closing %r: %s", resource, exc)
