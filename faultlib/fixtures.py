"""The fixtures every test folder shares (``tests/`` and each package's own ``<package>/tests/``), a
pytest plugin the root ``conftest.py`` registers once: the processes a test starts, the broker's
queues emptied or captured. And ``ALL_DATABASES``, the aliases a transactional test flushes."""

import pytest

from faultlib import broker as broker_support
from faultlib.processes import ProcessGroup, database_url, process_environment

ALL_DATABASES = ["default", "gateway"]


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
