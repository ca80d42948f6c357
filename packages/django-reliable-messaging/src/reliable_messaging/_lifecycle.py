"""Graceful shutdown and backoff for the long-running commands.

SIGTERM or SIGINT sets a flag: the loop finishes the batch or message in hand and exits 0.
A second signal exits at once.
"""

import logging
import random
import signal
import time
from types import FrameType

from django.core.management.base import CommandError
from django.db import DatabaseError, InterfaceError, InternalError, OperationalError, connection, connections

from reliable_messaging._conf import setting
from reliable_messaging._db_errors import READ_ONLY_SQL_TRANSACTION, sqlstate_of
from reliable_messaging._health import unmigrated_apps
from reliable_messaging._session_timeouts import apply_session_timeouts

logger = logging.getLogger("reliable_messaging.lifecycle")


class Stopper:
    def __init__(self) -> None:
        self.stopping = False

    def install(self) -> "Stopper":
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            logger.warning("second signal: exiting now")
            raise SystemExit(1)
        logger.info("signal received: finishing the work in hand", extra={"signal": signal.Signals(signum).name})
        self.stopping = True

    def sleep(self, seconds: float) -> None:
        """Sleep, waking early when a stop was asked for."""
        deadline = time.monotonic() + seconds
        while not self.stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(remaining, 0.1))


class Backoff:
    """Exponential backoff with jitter, so a broken dependency is never hammered."""

    def __init__(self, initial: float = 0.5, maximum: float = 30.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self.failures = 0

    def next_delay(self) -> float:
        self.failures += 1
        delay: float = min(self.maximum, self.initial * 2 ** (self.failures - 1))
        return delay * random.uniform(0.75, 1.0)

    def reset(self) -> None:
        self.failures = 0


# A database that does not answer is probed at least this often, however long it has been
# down: a failover ends within seconds (Patroni's TTL), and a probe is one connection attempt.
DATABASE_BACKOFF_MAX = 5.0


def drop_broken_db_connections() -> None:
    """Close database connections that have failed, so the next query reconnects.

    Django's ``close_old_connections`` also closes a connection past ``CONN_MAX_AGE``; a
    long-running worker keeps its connection instead and only replaces a broken one.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.errors_occurred and not conn.in_atomic_block:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()


# The server ended the session: pg_terminate_backend (57P01), a crash (57P02), a restart (57P03).
SESSION_ENDED = ("57P01", "57P02", "57P03")


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says a database *connection* was lost (its backend ended, its socket broke)
    rather than that a statement failed: no fault of the work that happened to find out.

    SQLSTATE class 08 and the session-ending codes; psycopg's own errors without a SQLSTATE
    ("the connection is lost", "server closed the connection unexpectedly") too. SQLite's
    errors never carry one and are not counted (a busy database is not a lost connection).
    A write refused as read-only (25006, an ``InternalError``) counts too: the server is a standby
    now (a failover); a new connection (``target_session_attrs=read-write``) finds the primary.
    """
    if isinstance(exc, InternalError) and sqlstate_of(exc) == READ_ONLY_SQL_TRANSACTION:
        return True
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    if code := sqlstate_of(exc):
        return code.startswith("08") or code in SESSION_ENDED
    return type(exc.__cause__ or exc).__module__.startswith("psycopg")


def reconnect_databases() -> None:
    """Close every connection outside a transaction, on every alias, so the next use opens a new
    one: a backend terminated while idle (another alias's, say) is only found out by its
    next query, which would fail too."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close()


def use_dedicated_connections(*, session_limits: bool = True) -> None:
    """Keep one connection per database alias for this process's lifetime, outside any pool.

    For the long-running loops (relay, consumers, deadline): they hold session state
    (``LISTEN``, ``application_name``) that a pool would hand to its next user unreset, and a
    pool would also keep idle connections of its own beside theirs. With ``session_limits``
    each connection starts with the workers' PostgreSQL limits (``WORKER_DATABASE_TIMEOUTS``),
    so a loop stuck inside a transaction holds its locks, and waits for others', only that
    long. Call it before the first query of the process.
    """
    for alias in connections:
        connections.settings[alias].get("OPTIONS", {}).pop("pool", None)
    if session_limits:
        apply_session_timeouts(setting("WORKER_DATABASE_TIMEOUTS"))


def refuse_unmigrated_database() -> None:
    """A worker whose apps' tables are missing would dead-letter every message it takes (a missing
    table is no outage): it refuses to start, naming the command that prepares the deployment. A
    database it cannot read yet is the worker's own backoff's to wait for."""
    try:
        missing = unmigrated_apps()
    except DatabaseError:
        return
    finally:  # a worker's threads (the relay's pipelines) open their own: this one would sit idle
        connection.close()
    if missing:
        raise CommandError(
            f"the database lacks migrations of {', '.join(missing)}: run `python manage.py "
            f"{setting('SETUP_COMMAND')}` for this deployment first"
        )
