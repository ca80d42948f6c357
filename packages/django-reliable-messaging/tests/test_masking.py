"""The host's SENSITIVE_FIELDS are never shown in full where a payload leaves its context:
``mask_sensitive`` for data, ``mask_text`` for free text (errors, tracebacks, log lines)."""

import pytest
from reliable_messaging.operator import mask_sensitive, mask_text

# Free text with a space: masked whole everywhere, never "tok_**** Vm_SecretValue".
SECRET = "tok_1QXu Vm_SecretValue"


@pytest.fixture(autouse=True)
def sensitive(settings):
    settings.MESSAGING = {**settings.MESSAGING, "SENSITIVE_FIELDS": ["api_key"]}


def test_mask_sensitive_masks_the_value_of_every_sensitive_key_at_any_depth():
    data = {"api_key": SECRET, "nested": [{"api_key": "opaque-secret"}], "total": "1.00"}
    assert mask_sensitive(data) == {
        "api_key": "tok_****",
        "nested": [{"api_key": "****"}],
        "total": "1.00",
    }


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (f"{{'api_key': '{SECRET}'}}", "{'api_key': 'tok_****'}"),
        (f'{{"api_key": "{SECRET}"}}', '{"api_key": "tok_****"}'),
        (f"api_key={SECRET}, total=1", "api_key=tok_****, total=1"),
        # A free-text token with a space, quoted or not, is masked whole.
        ("{'api_key': 'tok_a b_SECRET'}", "{'api_key': 'tok_****'}"),
        ('{"api_key": "tok_a b_SECRET", "total": 1}', '{"api_key": "tok_****", "total": 1}'),
        ('{"api_key": "tok_a\\" b_SECRET"}', '{"api_key": "tok_****"}'),
        ("api_key=tok_a b_SECRET, total=1", "api_key=tok_****, total=1"),
        ("api_key=tok_a b_SECRET\nnext line", "api_key=tok_****\nnext line"),
        # Only a short run of letters before "_" is shown: it names the token's kind.
        ("api_key='a b_SECRET'", "api_key='****'"),
        ("api_key=SECRET12_x", "api_key=****"),
        ("nothing to hide", "nothing to hide"),
    ],
)
def test_mask_text_masks_tokens_inside_free_text(text, masked):
    assert mask_text(text) == masked
