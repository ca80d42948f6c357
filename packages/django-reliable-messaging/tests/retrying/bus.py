"""The bus of the retry-policy and breaker tests: this project's contexts and the test contexts of
this folder (each its own policy), the real relay and consumer loop run in the test's process, on
the test database and broker. Not a conftest: the tests that use it import ``bus``."""

import contextlib
import os
from collections.abc import Iterator

import pytest
from kombu import Connection
from reliable_messaging import _broker as broker
from reliable_messaging import _filesystem_transport as filesystem_transport
from reliable_messaging import _registry as registry
from reliable_messaging._consumer import ConsumerWorker
from reliable_messaging._declarations import installed
from reliable_messaging._relay import OutboxRelay

from retrying import handlers

PACKAGES = ("retrying", "retrying.twin", "retrying.breaking")
CONSUMERS = ("retrying", "twin", "breaking")


def empty_queues() -> None:
    if not os.environ.get("BROKER_URL", "").startswith("amqp"):
        return  # the filesystem broker's folder is the test's own
    with Connection(os.environ["BROKER_URL"]) as connection:
        for consumer in CONSUMERS:
            for name in [
                f"{consumer}_queue",
                broker.dead_letter_queue_name(consumer),
                *(broker.retry_queue_name(consumer, step) for step in broker.DELAY_LADDER),
            ]:
                channel = connection.channel()
                with contextlib.suppress(connection.channel_errors):  # not declared yet
                    channel.queue_purge(name)


@pytest.fixture
def bus(workdir, transactional_db, settings, monkeypatch) -> Iterator[None]:
    settings.MESSAGING = {
        **settings.MESSAGING,
        "DECLARED_CONTEXTS": [*settings.MESSAGING["DECLARED_CONTEXTS"], *PACKAGES],
        # the policy of a handler that declares none (the breaker's handler)
        "CONSUMER_RETRY_DELAYS": [0.2],
        "CONSUMER_MAX_ATTEMPTS": 4,
    }
    monkeypatch.setattr(registry, "_handlers", dict(registry._handlers))  # this test's subscriptions only
    for declaration in installed():
        if declaration.package in PACKAGES:
            registry.register_declared(declaration)
    # kombu keeps the exchanges and bindings a process declared in memory, per transport: a
    # test's broker folder is new, and must be declared in again
    filesystem_transport.Transport.global_state.clear()
    handlers.CALLS.clear()
    handlers.FAILING_CALLS["breaking"] = 0
    empty_queues()
    yield
    empty_queues()


def relay() -> None:
    assert OutboxRelay(housekeeping=False).run(once=True) == 0


def consume(*consumers: str, batch_size: int = 1) -> None:
    """The consumer loop until nothing has arrived for 1.5 s (longer than any step a retry of
    these tests waits in)."""
    assert ConsumerWorker(list(consumers), idle_timeout=1.5, batch_size=batch_size).run(once=True) == 0
