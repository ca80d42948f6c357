"""What is about tests/ itself: the ``needs_contexts`` marker of its cross-context tests, and the
orchestrated saga's folder left to its own session. The session-wide set-up and the tiers' check are
the root conftest.py's; the fixtures every test folder shares (processes, the broker's queues) are
faultlib/fixtures.py's, which it registers. tests/unit needs no service; tests/integration and
tests/e2e run on real PostgreSQL and RabbitMQ (``make test`` provides both)."""

import pytest
from django.conf import settings


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
