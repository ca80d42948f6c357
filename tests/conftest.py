"""Shared fixtures. tests/unit needs no service; tests/integration and tests/e2e run on real PostgreSQL
and RabbitMQ (``make test`` provides both)."""

from pathlib import Path

import pytest
from django.conf import settings

from faultlib import broker as broker_support
from faultlib.processes import ProcessGroup, database_url, process_environment

ALL_DATABASES = ["default", "gateway"]

# Payments code run in this process (integration tests, the saga helpers) charges the in-process
# stand-in on the same ledger; the processes a test starts reach the gateway's HTTP service
# (faultlib.processes starts it with their consumers).
settings.GATEWAY_URL = "inprocess:"


UNIT_TIER = Path(__file__).parent / "unit"

# The orchestrated saga's tests need the orchestrator installed (its tables, its queue): make test
# runs them in a session of their own with ORCHESTRATOR=1; a session without it does not collect them.
if "orchestrator" not in settings.INSTALLED_CONTEXTS:
    collect_ignore = ["orchestration"]


def pytest_collection_modifyitems(config, items):
    """tests/unit needs no service; the integration and end-to-end tiers refuse to run without both."""
    if all(UNIT_TIER in item.path.parents for item in items):
        return
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine or not settings.BROKER_URL.startswith("amqp"):
        raise pytest.UsageError(
            "tests/integration and tests/e2e need real PostgreSQL and RabbitMQ: run them with `make test` "
            "(or scripts/with_test_services.py .venv/bin/pytest ...); `make test-unit` needs neither."
        )


@pytest.fixture
def process_env() -> dict[str, str]:
    return process_environment(database_url())


@pytest.fixture
def processes(process_env, tmp_path):
    group = ProcessGroup(tmp_path, process_env)
    yield group
    group.stop_all()
    print(group.logs())


@pytest.fixture
def quiet_broker():
    """Empty the topology's queues before the test."""
    broker_support.purge_topology()


@pytest.fixture
def capture():
    """Make capture queues bound to the events exchange; they are deleted afterwards."""
    made = []

    def make(binding_key: str = "#", exchange: str | None = None) -> broker_support.CaptureQueue:
        queue = broker_support.CaptureQueue(binding_key, exchange)
        made.append(queue)
        return queue

    yield make
    for queue in made:
        queue.delete()
