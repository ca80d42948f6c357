"""Is the broker reachable? For ``/readyz``: one short connection attempt per node, never a retry loop."""

import logging

from django.conf import settings
from kombu import Connection

from messaging import broker

logger = logging.getLogger(__name__)


def broker_reachable(*, timeout: float) -> bool:
    """Open (and close) one connection; on RabbitMQ that includes the AMQP handshake and login."""
    if settings.BROKER_URL.startswith("filesystem"):
        connection = broker.connect()  # folders on disk: nothing to time out
    else:
        connection = Connection(settings.BROKER_URL, connect_timeout=timeout, heartbeat=0)
    try:
        # One attempt per node that BROKER_URL names, no sleep: on a cluster, any node that answers will do.
        broker.connect_to_a_node(connection)
        return connection.connected
    except Exception as exc:  # noqa: BLE001 - any failure to connect means "down"
        logger.warning("readiness: broker unreachable: %s: %s", type(exc).__name__, exc)
        return False
    finally:
        broker.close_quietly(connection)
