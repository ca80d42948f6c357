import logging

from django.core.management.base import BaseCommand
from django.db import DatabaseError, connection
from reliable_messaging.api import Stopper, refuse_unmigrated_database, serve_metrics, use_dedicated_connections

from orders.conf import setting
from orders.services.checkout import checkout_keys_purge
from orders.services.saga import orders_expire

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Fail (and so compensate) orders PENDING longer than SAGA_TIMEOUT; also drop expired checkout keys."

    def add_arguments(self, parser):
        parser.add_argument(
            "--loop", action="store_true", help="check every min(SAGA_TIMEOUT, 5) seconds until stopped"
        )
        parser.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")

    def handle(self, *args, loop=False, metrics_port=None, **options):
        # No workers' session limits: it never waits on anything outside the database inside a
        # transaction, and its purge of expired keys may be one long statement after downtime.
        use_dedicated_connections(session_limits=False)
        # Timeouts are counted here: orders_saga_outcomes_total{reason="timeout"}.
        serve_metrics(metrics_port, variable="DEADLINE_METRICS_PORT")
        refuse_unmigrated_database()
        stopper = Stopper().install()
        interval = min(setting("SAGA_TIMEOUT"), 5.0)
        while True:
            try:
                expired = orders_expire(timeout_seconds=setting("SAGA_TIMEOUT"))
                purged = checkout_keys_purge()
            except DatabaseError as exc:
                if not loop:
                    raise
                # A lost connection must not end the loop: the next check opens a new one.
                logger.warning("database unavailable: %s", exc)
                connection.close()
            else:
                if expired or purged:
                    logger.info("saga deadline", extra={"orders_failed": expired, "checkout_keys_purged": purged})
                if not loop:
                    self.stdout.write(f"{expired} order(s) failed for timeout")
                    return
            stopper.sleep(interval)
            if stopper.stopping:
                return
