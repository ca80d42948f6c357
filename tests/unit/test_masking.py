"""Payment tokens are never shown in full outside payments: the masking itself and the log lines
(tests/integration/test_masking_in_pages.py: the admin's pages and the API's timeline)."""

import io
import json
import logging

import pytest
from django.conf import settings
from reliable_messaging.operator import mask_sensitive, mask_text

from config.logging import configure_logging

TOKEN = "tok_visa"
# Free text with a space: masked whole everywhere, never "tok_**** Vm_SecretValue".
SECRET = "tok_1QXu Vm_SecretValue"
SECRET_TAIL = "Vm_SecretValue"


def test_mask_sensitive_masks_the_value_of_every_sensitive_key_at_any_depth():
    data = {"payment_token": SECRET, "nested": [{"payment_token": "opaque-secret"}], "total": "1.00"}
    assert mask_sensitive(data) == {
        "payment_token": "tok_****",
        "nested": [{"payment_token": "****"}],
        "total": "1.00",
    }


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"{{'payment_token': '{SECRET}'}}", "{'payment_token': 'tok_****'}"),
        (f'{{"payment_token": "{SECRET}"}}', '{"payment_token": "tok_****"}'),
        (f"payment_token={SECRET}, total=1", "payment_token=tok_****, total=1"),
        # A free-text token with a space, quoted or not, is masked whole.
        ("{'payment_token': 'tok_a b_SECRET'}", "{'payment_token': 'tok_****'}"),
        ('{"payment_token": "tok_a b_SECRET", "total": 1}', '{"payment_token": "tok_****", "total": 1}'),
        ('{"payment_token": "tok_a\\" b_SECRET"}', '{"payment_token": "tok_****"}'),
        ("payment_token=tok_a b_SECRET, total=1", "payment_token=tok_****, total=1"),
        ("payment_token=tok_a b_SECRET\nnext line", "payment_token=tok_****\nnext line"),
        # Only a short run of letters before "_" is shown: it names the token's kind.
        ("payment_token='a b_SECRET'", "payment_token='****'"),
        ("payment_token=SECRET12_x", "payment_token=****"),
        ("nothing to hide", "nothing to hide"),
    ],
)
def test_mask_text_masks_tokens_inside_free_text(text, masked):
    assert mask_text(text) == masked


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
