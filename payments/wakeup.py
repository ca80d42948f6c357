"""Wakes the gateway worker the moment a call is recorded due (PostgreSQL ``LISTEN``/``NOTIFY``),
so a charge waits for the network, not for the worker's next look at the table.

The handler's transaction sends ``NOTIFY`` (delivered at its commit; PostgreSQL folds a
transaction's identical notifications into one, so a batch of charges wakes the worker once).
The worker listens on a connection of its own, in a thread, because its loop already waits on
the calls in the air. On SQLite, or while the listener is reconnecting, the worker's short poll
finds the calls anyway: a notification only ever makes a call sooner, never possible.
"""

import logging
import threading

from django.db import DatabaseError, connection
from reliable_messaging.api import DATABASE_BACKOFF_MAX, Backoff

logger = logging.getLogger(__name__)

CHANNEL = "payments_gateway_calls"
APPLICATION_NAME = "gateway-calls-listener"


def notify_call_due() -> None:
    """Inside the transaction that records a call due now; sent only if it commits."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])


class DueCallListener(threading.Thread):
    """Sets ``wake`` on every notification, until ``stop``; reconnects with a backoff."""

    def __init__(self, wake: threading.Event, stop: threading.Event) -> None:
        super().__init__(name="gateway-calls-listener", daemon=True)
        self.wake, self.stop = wake, stop
        self.outage = Backoff()  # reset once listening again

    @staticmethod
    def enabled() -> bool:
        return connection.vendor == "postgresql"

    def run(self) -> None:
        import psycopg  # PostgreSQL only

        while not self.stop.is_set():
            try:
                self._listen()
                continue  # returns only once stopped
            except (DatabaseError, psycopg.Error) as exc:
                delay = min(self.outage.next_delay(), DATABASE_BACKOFF_MAX)
                logger.warning("gateway call wake-ups lost, listening again in %.1fs: %s", delay, exc)
            except Exception:  # never die silently: the worker would fall back to polling unnoticed
                delay = min(self.outage.next_delay(), DATABASE_BACKOFF_MAX)
                logger.exception("gateway call wake-ups failed, listening again in %.1fs", delay)
            self.wake.set()  # whatever was recorded meanwhile: look now
            self.stop.wait(delay)

    def _listen(self) -> None:
        import psycopg

        # A connection of its own, outside Django's pool: LISTEN is session state that a pool
        # would hand to its next user, and closing it must end the session.
        params = {**connection.get_connection_params(), "application_name": APPLICATION_NAME}
        with psycopg.connect(**params, autocommit=True) as raw:
            raw.execute(f"LISTEN {CHANNEL}")
            self.outage.reset()
            self.wake.set()  # a call recorded before LISTEN took effect notified nobody
            while not self.stop.is_set():
                for _ in raw.notifies(timeout=0.5, stop_after=1):
                    self.wake.set()
