"""Log injection (issue 43): a CR or LF in a value a client chose (a username at the admin's login,
an id a publisher put in a message) is escaped, so each event stays one line of the console log."""

import io
import logging

import pytest
import structlog
from django.test import Client

pytestmark = pytest.mark.django_db

USERNAME = "x\nFAKE LINE"


@pytest.fixture
def console():
    """What the configured handler (stderr, the console renderer) writes, as it would write it."""
    (handler,) = [
        h for h in logging.getLogger().handlers if isinstance(h.formatter, structlog.stdlib.ProcessorFormatter)
    ]
    written = io.StringIO()
    previous = handler.setStream(written)
    yield written
    handler.setStream(previous)


def test_a_failed_admin_login_with_a_newline_in_the_username_is_one_line_with_it_escaped(console):
    for _ in range(5):  # the fifth locks the account out: service_platform.admin_lockout logs that too
        Client(REMOTE_ADDR="198.51.100.7").post("/admin/login/", {"username": USERNAME, "password": "wrong"})

    lines = console.getvalue().splitlines()
    failures = [line for line in lines if "AXES: New login failure" in line]
    locked = [line for line in lines if "admin login locked out" in line]
    assert [line for line in lines if line.startswith("FAKE LINE")] == []
    assert len(failures) == 1 and 'username: "x\\nFAKE LINE"' in failures[0]
    assert len(locked) == 1 and "username='x\\nFAKE LINE'" in locked[0]  # the renderer's repr()


def test_bound_context_and_extra_values_are_escaped_too_and_the_traceback_keeps_its_lines(console):
    logger = logging.getLogger("tests.edge")
    with structlog.contextvars.bound_contextvars(message_id="m\x1b[31m\x0bFAKE"):
        logger.warning("handled %s", "a\u2028b", extra={"consumer": "c\nd", "event_type": "e\x85f"})
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed")

    handled, failed, *traceback = console.getvalue().splitlines()
    assert "handled a\\u2028b" in handled
    assert "consumer='c\\nd'" in handled and "event_type=e\\x85f" in handled
    assert "message_id=m\\x1b[31m\\x0bFAKE" in handled
    assert "failed" in failed and traceback[0] == "Traceback (most recent call last):"
