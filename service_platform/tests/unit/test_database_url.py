"""The database URL the settings read (service_platform/settings.py's ``database``): a cluster's URL
reaches libpq whole. The durations they read: kernel/tests/unit/test_durations.py."""


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
