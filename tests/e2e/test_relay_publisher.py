"""An idle relay keeps its broker connection alive through heartbeats (the relay's batched frames: the
bus's own tests, test_relay_publisher.py)."""

import time

import pytest
from django.db import transaction
from reliable_messaging.api import publish
from reliable_messaging.models import OutboxMessage

from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import wait_until
from tests.support.outbox import unchecked_publishing

transactional = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


def publish_payloads(payloads: list[dict]) -> list[str]:
    with unchecked_publishing(), transaction.atomic():
        return [
            str(publish(event_type="test.thing.happened", payload=p, aggregate_type="thing", aggregate_id=str(n)))
            for n, p in enumerate(payloads)
        ]


@transactional
def test_an_idle_relay_keeps_its_broker_connection_through_heartbeats(processes, quiet_broker, tmp_path):
    # Heartbeats every 2 s: a relay that stopped reading its socket would be cut off after ~4 s.
    relay = processes.start(
        "relay", "run_outbox_relay", env={"BROKER_HEARTBEAT": "2", "RELAY_POLL_INTERVAL": "30", "RELAY_PIPELINES": "1"}
    )
    wait_until(lambda: "relay listening" in log_of(processes), timeout=30, message="the relay to start")
    time.sleep(10)  # time is the subject: idle for more than two heartbeat timeouts
    [message_id] = publish_payloads([{"after": "idle"}])
    wait_until(
        lambda: OutboxMessage.objects.filter(event_id=message_id, published_at__isnull=False).exists(),
        timeout=10,
        message="the row published",
    )
    assert processes.stop(relay) == 0
    log = log_of(processes)
    assert log.count("relay connected to the broker") == 1, log
    assert "broker unavailable" not in log, log


def log_of(processes) -> str:
    return "\n".join(path.read_text(errors="replace") for _, _, path in processes.procs)
