"""Payment tokens are never shown in full outside payments: the log lines (the masking itself: the
bus's own tests, test_masking.py; tests/integration/test_masking_in_pages.py: the admin's pages and
the API's timeline)."""

import io
import json
import logging

import pytest
from django.conf import settings

from service_platform.logging import configure_logging

# Free text with a space: masked whole everywhere, never "tok_**** Vm_SecretValue".
SECRET = "tok_1QXu Vm_SecretValue"
SECRET_TAIL = "Vm_SecretValue"


@pytest.fixture
def json_logs():
    """What the root handler would write with LOG_FORMAT=json, captured in memory."""
    configure_logging("json", "INFO")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.getLogger().handlers[0].formatter)
    logging.getLogger("tests.masking").addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logging.getLogger("tests.masking").removeHandler(handler)
    configure_logging(settings.LOG_FORMAT, settings.LOG_LEVEL)


def test_log_lines_mask_tokens_in_fields_messages_and_tracebacks(json_logs):
    log = logging.getLogger("tests.masking")
    log.warning(
        "charging %s", {"payment_token": SECRET}, extra={"payment_token": SECRET, "payload": {"payment_token": SECRET}}
    )
    try:
        raise RuntimeError(f"payment_token={SECRET}")
    except RuntimeError:
        log.exception("failed")

    warning, failure = json_logs()
    assert (warning["event"], warning["payment_token"], warning["payload"]) == (
        "charging {'payment_token': 'tok_****'}",
        "tok_****",
        {"payment_token": "tok_****"},
    )
    assert failure["event"] == "failed"
    assert failure["exception"].endswith("RuntimeError: payment_token=tok_****")
    assert SECRET_TAIL not in json.dumps([warning, failure])
