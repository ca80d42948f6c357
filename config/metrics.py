"""``/metrics``: this process's Prometheus registry plus gauges read from the database.

The gauges (outbox backlog, parked rows, dead letters, pending orders) describe the whole
system, so any web process or worker answers the same. Counters live where the work is done:
the relay and the consumers serve theirs on ``--metrics-port``; saga outcomes are counted in
the process that decides them (see ``orders.metrics``). Under gunicorn with several workers
set ``PROMETHEUS_MULTIPROC_DIR`` so the workers' counters are added up (docs/operations.md).
"""

import logging
import os

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpResponse
from django.utils.crypto import constant_time_compare
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

import orders.metrics  # noqa: F401 - registers the saga outcome metrics in this process
from messaging.api import CONSUMERS, dead_letter_counts_by_state, outbox_backlog
from orders.monitoring import orders_pending_summary

logger = logging.getLogger(__name__)

STUCK_AFTER = 60.0  # seconds an order may stay PENDING before it counts as stuck


class DatabaseCollector(Collector):
    """Read at every scrape: a handful of indexed aggregate queries."""

    def collect(self):
        try:
            backlog = outbox_backlog()
            letters = dead_letter_counts_by_state()
            pending = orders_pending_summary(stuck_after=STUCK_AFTER)
        except DatabaseError as exc:
            logger.warning("metrics: database unreachable: %s", exc)
            yield GaugeMetricFamily("shop_database_up", "1 if /metrics could read the database.", value=0)
            return
        yield GaugeMetricFamily("shop_database_up", "1 if /metrics could read the database.", value=1)
        yield GaugeMetricFamily(
            "messaging_outbox_pending", "Outbox rows waiting to be published (not parked).", value=backlog["pending"]
        )
        yield GaugeMetricFamily(
            "messaging_outbox_oldest_pending_age_seconds",
            "Age of the oldest outbox row waiting to be published (0 when none).",
            value=backlog["oldest_pending_age"],
        )
        yield GaugeMetricFamily(
            "messaging_outbox_parked", "Outbox rows parked after repeated refusals.", value=backlog["parked"]
        )
        dead = GaugeMetricFamily(
            "messaging_dead_letters",
            "Dead letters stored, per consumer: waiting for an operator, or replayed since they failed.",
            labels=["consumer", "state"],
        )
        for consumer in CONSUMERS:
            for state in ("waiting", "replayed"):
                dead.add_metric([consumer, state], letters.get((consumer, state), 0))
        yield dead
        yield GaugeMetricFamily("orders_pending", "Orders in PENDING.", value=pending["pending"])
        yield GaugeMetricFamily(
            "orders_pending_stuck", f"Orders PENDING for longer than {STUCK_AFTER:.0f}s.", value=pending["stuck"]
        )
        yield GaugeMetricFamily(
            "orders_oldest_pending_age_seconds",
            "Age of the oldest PENDING order (0 when none).",
            value=pending["oldest_age"],
        )


class _Exposition:
    """This process's metrics (or, in multiprocess mode, all workers'), then the database's."""

    def __init__(self):
        self.database = DatabaseCollector()

    def collect(self):
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            process = CollectorRegistry()
            MultiProcessCollector(process)
        else:
            process = REGISTRY
        yield from process.collect()
        yield from self.database.collect()


_exposition = _Exposition()


def metrics_view(request):
    token = settings.METRICS_TOKEN
    if token and not constant_time_compare(request.headers.get("Authorization", ""), f"Bearer {token}"):
        return HttpResponse(
            "unauthorized\n", status=401, content_type="text/plain", headers={"WWW-Authenticate": "Bearer"}
        )
    return HttpResponse(generate_latest(_exposition), content_type=CONTENT_TYPE_LATEST)
