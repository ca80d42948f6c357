"""Shared fixtures of tests/ (the session-wide set-up and the tiers' check: the root conftest.py).
tests/unit needs no service; tests/integration and tests/e2e run on real PostgreSQL and RabbitMQ
(``make test`` provides both)."""

import pytest
from django.conf import settings

from faultlib import broker as broker_support
from faultlib.processes import ProcessGroup, database_url, process_environment

ALL_DATABASES = ["default", "gateway"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "needs_contexts(*names): the test is about these contexts; skipped, saying so, where one is not installed",
    )


def pytest_collection_modifyitems(items):
    """A test about a context that is not installed (removed: its folder and its INSTALLED_CONTEXTS
    line) is skipped with the reason, never lost to an import error: it imports the context's code
    inside the test. A test of one context alone belongs in its package (<context>/tests/)."""
    installed = {package.rsplit(".", 1)[-1] for package in settings.INSTALLED_CONTEXTS}
    for item in items:
        for mark in item.iter_markers("needs_contexts"):
            if missing := sorted(set(mark.args) - installed):
                item.add_marker(pytest.mark.skip(reason=f"{', '.join(missing)} not installed (INSTALLED_CONTEXTS)"))


# The orchestrated saga's tests need the orchestrator installed (its tables, its queue): make test
# runs them in a session of their own with ORCHESTRATOR=1; a session without it does not collect them.
if "orchestrator" not in settings.INSTALLED_CONTEXTS:
    collect_ignore = ["orchestration"]


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
