"""Session-wide test set-up. pytest collects ``tests/`` and each context's own ``<context>/tests/``
(pyproject's testpaths), both in tiers: ``.../tests/unit`` needs no service, the rest real
PostgreSQL and RabbitMQ. A context of the tree that is not installed (the orchestrator without
ORCHESTRATOR=1) has no tables or queue here, so its tests are not collected."""

from pathlib import Path

import pytest
from django.conf import settings
from reliable_messaging._declarations import DECLARATION_FILE

# The fixtures every test folder shares, tests/ and each package's own (processes, the broker's queues).
pytest_plugins = ["faultlib.fixtures"]

_TREE = Path(__file__).parent
_NOT_INSTALLED = [
    path.parent / "tests"
    for path in _TREE.glob(f"*/{DECLARATION_FILE}")
    if path.parent.name not in settings.INSTALLED_CONTEXTS
]


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    """What lies in a tests folder of a context not installed. A hook, not ``collect_ignore``: the
    folder itself is one of testpaths' arguments, which ``collect_ignore`` does not filter."""
    return any(collection_path.is_relative_to(folder) for folder in _NOT_INSTALLED) or None


# Payments code run in this process (integration tests, the saga helpers) charges the in-process
# stand-in on the same ledger; the processes a test starts reach the gateway's HTTP service
# (faultlib.processes starts it with their consumers).
settings.GATEWAY_URL = "inprocess:"


def in_unit_tier(path: Path) -> bool:
    """``tests/unit/...`` or ``<context>/tests/unit/...``."""
    return any(p.name == "unit" and p.parent.name == "tests" for p in path.parents)


def pytest_collection_modifyitems(config, items):
    """The unit tier needs no service; the integration and end-to-end tiers refuse to run without both."""
    if all(in_unit_tier(item.path) for item in items):
        return
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine or not settings.BROKER_URL.startswith("amqp"):
        raise pytest.UsageError(
            "tests/integration and tests/e2e need real PostgreSQL and RabbitMQ: run them with `make test` "
            "(or scripts/with_test_services.py .venv/bin/pytest ...); `make test-unit` needs neither."
        )


@pytest.fixture(scope="session", autouse=True)
def _flush_by_delete():
    """After each transactional test pytest-django empties every database it used (Django's ``flush``),
    on PostgreSQL with one ``TRUNCATE`` of every table: a new file for each table and index, about
    0.1 s per database of this project's tables. The tables hold a test's few rows, which a
    ``DELETE`` per table takes in milliseconds; its foreign keys are deferred to the flush's commit,
    by when every table is empty. Over the suite's 250 or so transactional tests, about a minute."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences:
            return truncate(self, style, tables, reset_sequences=True, allow_cascade=allow_cascade)
        return [f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};" for table in tables]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        yield
