"""Are the database and the broker reachable? For ``/readyz`` and for a consumer deciding whether a
failure was an outage: one short attempt each (the broker: per node), never a retry loop."""

import logging

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from kombu import Connection

from reliable_messaging import _broker as broker
from reliable_messaging import _filesystem_transport as filesystem_transport
from reliable_messaging._conf import setting

logger = logging.getLogger("reliable_messaging.health")


def database_reachable() -> bool:
    """One ``SELECT 1`` on the default connection. A connection that an error broke is replaced
    first (a failed handler may have broken it while the database is fine), and one that fails
    is closed, so the next use starts afresh. A healthy connection is kept, inside a request or
    a transaction too."""
    try:
        if connection.connection is not None and connection.errors_occurred and not connection.is_usable():
            connection.close()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except DatabaseError as exc:
        logger.warning("database unreachable: %s", exc)
        connection.close()
        return False


_all_applied = False  # once true, true for this process: migrations are never unapplied under it


def unmigrated_apps() -> list[str]:
    """The installed apps with migrations not applied to the default database (a DatabaseError if
    it cannot be read)."""
    global _all_applied
    if _all_applied:
        return []
    executor = MigrationExecutor(connection)
    missing = sorted(
        {migration.app_label for migration, _ in executor.migration_plan(executor.loader.graph.leaf_nodes())}
    )
    _all_applied = not missing
    return missing


def _embedded_broker_writable() -> bool:
    try:
        connection = broker.connect()  # makes the folders when missing
        options = connection.transport_options or {}  # connect() sets them on the embedded broker
        writable = filesystem_transport.folders_writable(options["data_folder_out"], options["control_folder"])
    except OSError as exc:
        logger.warning("readiness: the embedded broker's folders are unusable: %s", exc)
        return False
    if not writable:
        logger.warning("readiness: the embedded broker's folders refuse writes (%s)", options["data_folder_out"])
    return writable


def broker_reachable(*, timeout: float) -> bool:
    """Open (and close) one connection; on RabbitMQ that includes the AMQP handshake and login.
    The embedded broker is its folders: up when a message can be written into them."""
    if setting("BROKER_URL").startswith("filesystem"):
        return _embedded_broker_writable()
    connection = Connection(setting("BROKER_URL"), connect_timeout=timeout, heartbeat=0)
    try:
        # One attempt per node that BROKER_URL names, no sleep: on a cluster, any node that answers will do.
        broker.connect_to_a_node(connection)
        return bool(connection.connected)
    except Exception as exc:  # noqa: BLE001 - any failure to connect means "down"
        logger.warning("readiness: broker unreachable: %s: %s", type(exc).__name__, exc)
        return False
    finally:
        broker.close_quietly(connection)
