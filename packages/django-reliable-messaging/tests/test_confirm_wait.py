"""A batch's wait for its confirms ends at its timeout however often the broker's heartbeats come
meanwhile: a broker that blocked the connection (a memory or disk alarm) confirms nothing and reads
nothing, and goes on sending a heartbeat every half interval."""

import time
from contextlib import contextmanager
from types import SimpleNamespace

import amqp
import pytest
from kombu import Connection
from reliable_messaging._publisher import BatchPublisher, ConfirmTimeout

HEARTBEAT_EVERY = 0.2  # seconds between two heartbeat frames of the broker
ALARM = 5.0  # seconds the alarm lasts: then the broker sends nothing at all


class BlockedByAnAlarm:
    """py-amqp's transport of a connection the broker blocked: a heartbeat frame now and then."""

    def __init__(self) -> None:
        self.connected = True
        self.timeout: float | None = None
        self.until = time.monotonic() + ALARM

    @contextmanager
    def having_timeout(self, timeout: float | None):
        self.timeout = timeout
        yield

    def read_frame(self) -> tuple[int, int, bytes]:
        wait = HEARTBEAT_EVERY if time.monotonic() < self.until else float("inf")
        if self.timeout is not None and self.timeout < wait:
            time.sleep(self.timeout)
            raise TimeoutError  # what a socket read past its timeout raises
        time.sleep(wait)
        return 8, 0, b""  # frame type 8: a heartbeat


def test_heartbeats_of_a_broker_that_confirms_nothing_do_not_lengthen_the_wait():
    connection = amqp.Connection()  # never connected: its frames come from the stand-in
    connection.transport = BlockedByAnAlarm()
    connection.on_inbound_frame = connection.frame_handler_cls(connection, connection.on_inbound_method)
    broker = Connection("amqp://guest:guest@127.0.0.1:1//")  # kombu's, around it
    broker._connection = connection
    publisher = BatchPublisher(broker, confirm_timeout=1.0)
    publisher._channel = SimpleNamespace(connection=connection)  # the batch published, one message unconfirmed
    publisher._unconfirmed = {1: "message-1"}

    started = time.monotonic()
    with pytest.raises(ConfirmTimeout, match="1 messages unconfirmed after 1.0s"):
        publisher._await_confirms()
    took = time.monotonic() - started

    assert 1.0 <= took < ALARM  # at its timeout (was: when the alarm ended)
