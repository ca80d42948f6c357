"""One broker connection as the relay and the consumers hold it.

Both need the same things, and the fixes for one (the memory alarm: drop without the close
handshake) must reach the other: connect and declare the whole topology; know what the broker
offers (confirms, returns and dead-lettering only on RabbitMQ) and the heartbeat it
negotiated; recognise a broker failure among exceptions; after a failure, *drop* the
connection (a blocked broker never answers the close handshake), and otherwise *close* it.
"""

import logging

from kombu import Connection

from reliable_messaging import _broker as broker
from reliable_messaging._publisher import BatchPublisher

logger = logging.getLogger("reliable_messaging.session")


class BrokerSession:
    def __init__(self, *, declare_topology: bool = True) -> None:
        self.connection: Connection | None = None
        self.declare_topology = declare_topology

    @property
    def connected(self) -> bool:
        return self.connection is not None and bool(self.connection.connected)

    def open(self) -> Connection:
        """The live connection, connecting (and declaring the topology) if there is none."""
        if self.connection is not None and self.connection.connected:
            return self.connection
        self.drop()
        connection = broker.connect()
        try:
            broker.connect_to_a_node(connection)
            if self.declare_topology:
                broker.declare_topology(connection)
        except BaseException:
            broker.drop(connection)  # a node that answered the connect may have failed the declaration
            raise
        self.connection = connection
        return connection

    def _amqp_connection(self) -> Connection | None:
        """The connection, if there is one and it is to RabbitMQ."""
        if self.connection is not None and broker.supports_confirms(self.connection):
            return self.connection
        return None

    @property
    def amqp(self) -> bool:
        """RabbitMQ: confirms, returns, TTLs, dead-lettering and heartbeats."""
        return self._amqp_connection() is not None

    @property
    def heartbeat(self) -> float:
        """The negotiated heartbeat interval in seconds (0: none)."""
        if (connection := self._amqp_connection()) is None:
            return 0
        heartbeat: float = getattr(connection.connection, "heartbeat", 0) or 0
        return heartbeat

    def heartbeat_check(self) -> None:
        if (connection := self._amqp_connection()) is not None:
            connection.heartbeat_check()

    def fileno(self) -> int | None:
        connection = self._amqp_connection()
        sock = getattr(connection.connection, "sock", None) if connection is not None else None
        return sock.fileno() if sock is not None else None

    def errors(self) -> tuple[type[BaseException], ...]:
        """What a failing broker raises (with OSError, always), also before a connection exists.

        A channel error while declaring the topology (a node answering ``NOT_FOUND`` while a
        queue's leader moves) happens before ``open`` returns: it must count as a broker
        failure too, retried, not as a crash of the loop.
        """
        connection = self.connection or broker.connect()  # not connected: only its transport's error types
        return (OSError, *connection.connection_errors, *connection.channel_errors)

    def drop(self) -> None:
        """After a failure: abandon the connection without the close handshake (its node is tried last next time)."""
        broker.note_failure(self.connection)
        broker.drop(self.connection)
        self.connection = None

    def close(self) -> None:
        """When done: close the connection properly."""
        broker.close_quietly(self.connection)
        self.connection = None

    def end(self, publisher: BatchPublisher | None, *, graceful: bool) -> None:
        """The relay's and the consumer's teardown: when done, close the publisher's channel, then
        the connection; after an error, drop the connection without waiting for the broker."""
        if graceful:
            if publisher is not None:
                publisher.close()
            self.close()
        else:
            self.drop()
