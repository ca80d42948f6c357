"""The durations the settings read (kernel/durations.py); the database URL's parser is the platform's
(service_platform/tests/unit/test_database_url.py), the CONTEXTS a deployment hosts the bus's own
tests' (test_declarations.py)."""

import pytest

from kernel.durations import parse_duration


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("300", 300.0), (" 90s ", 90.0), ("1.5", 1.5), ("15m", 900.0), ("24h", 86400.0), ("7d", 604800.0), (2, 2.0)],
)
def test_a_duration_is_read_in_seconds(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "5w", "-1", "1 2", "m", "1.5.2s"])
def test_anything_else_is_refused_with_examples(value):
    with pytest.raises(ValueError, match=r"not a duration: .* \(use e\.g\. 300, 90s, 15m, 24h, 7d\)"):
        parse_duration(value)
