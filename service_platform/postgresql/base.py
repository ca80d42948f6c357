"""Django's PostgreSQL backend, with a pool health check that cannot hang.

psycopg_pool's own check (``ConnectionPool.check_connection``, which ``CONN_HEALTH_CHECKS``
installs) waits for the server's answer without a limit: a server that stopped answering
while TCP still acknowledges its packets (a hung host, a stalled proxy) would hold the request
forever. Ours gives up after ``CHECK_SECONDS``; the pool then discards the connection and
tries a new one, which ``connect_timeout`` bounds. Together with the pool's own ``timeout``, a
request learns within seconds that the database is gone, and answers 503.
"""

from django.db.backends.postgresql import base
from psycopg import Connection, OperationalError, generators, pq

CHECK_SECONDS = 1.0  # worst case for a request: the pool timeout (3 s) plus one check


def check_connection(conn: Connection) -> None:
    if not conn.autocommit:  # the pool hands connections out in autocommit
        raise OperationalError("a pooled connection outside autocommit")
    try:
        with conn.lock:
            conn.pgconn.send_query(b"")
            results = conn.wait(generators.execute(conn.pgconn), timeout=CHECK_SECONDS)
        # A lost connection comes back as an error result, not as an exception.
        if not results or results[-1].status != pq.ExecStatus.EMPTY_QUERY:
            raise OperationalError(conn.pgconn.get_error_message() or "the connection failed its check")
    except OperationalError:
        conn.close()  # its state is unknown: never hand it out again
        raise


class DatabaseWrapper(base.DatabaseWrapper):
    @property
    def pool(self):
        pool = super().pool
        # Django builds the pool with check=ConnectionPool.check_connection (CONN_HEALTH_CHECKS).
        if pool is not None and pool._check is not None and pool._check is not check_connection:
            pool._check = check_connection
        return pool
