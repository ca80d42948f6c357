"""The parsers behind the settings: durations and the database URL (the CONTEXTS a deployment
hosts: the bus's own tests, test_declarations.py)."""

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


def test_a_multi_host_database_url_reaches_libpq_whole():
    # scripts/postgres_cluster.py url: every member, and libpq keeps only the writable one
    from django.db.backends.postgresql.base import DatabaseWrapper

    from service_platform.settings import database

    url = "postgres://app@10.0.0.1:5432,10.0.0.2:5433,10.0.0.3:5434/shop?target_session_attrs=read-write"
    config = {**database(url, pool=False), "TIME_ZONE": None, "AUTOCOMMIT": True, "CONN_MAX_AGE": 0}
    params = DatabaseWrapper(config).get_connection_params()
    assert params["host"] == "10.0.0.1,10.0.0.2,10.0.0.3" and params["port"] == "5432,5433,5434"
    assert params["target_session_attrs"] == "read-write"
    assert params["connect_timeout"] == 3 and params["keepalives_idle"] == 30  # the failover's detection
