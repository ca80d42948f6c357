"""``/metrics``: this process's Prometheus registry plus gauges read from the database.

The gauges (outbox backlog, parked rows, dead letters, and what the hosted contexts register,
such as pending orders) describe this deployment's database, so any of its web processes
answers the same. Counters live where the work is done:
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
from reliable_messaging.operator import (
    dead_letter_counts_by_state,
    local_consumers,
    oldest_waiting_dead_letters,
    outbox_backlog,
    scheduled_backlog,
)

from kernel.operations import database_gauges

logger = logging.getLogger(__name__)


class DatabaseCollector(Collector):
    """Read at every scrape: a handful of indexed aggregate queries, messaging's and those of
    every hosted context that registered gauges (``kernel.operations``)."""

    def collect(self):
        try:
            backlog = outbox_backlog()
            scheduled = scheduled_backlog()
            letters = dead_letter_counts_by_state()
            oldest_letters = oldest_waiting_dead_letters()
            contexts = [metric for gauges in database_gauges() for metric in gauges()]
        except DatabaseError as exc:
            logger.warning("metrics: database unreachable: %s", exc)
            yield GaugeMetricFamily("shop_database_up", "1 if /metrics could read the database.", value=0)
            return
        yield GaugeMetricFamily("shop_database_up", "1 if /metrics could read the database.", value=1)
        yield GaugeMetricFamily(
            "messaging_outbox_pending", "Outbox rows waiting to be published (not parked).", value=backlog.pending
        )
        yield GaugeMetricFamily(
            "messaging_outbox_oldest_pending_age_seconds",
            "Age of the oldest outbox row waiting to be published (0 when none).",
            value=backlog.oldest_pending_age,
        )
        yield GaugeMetricFamily(
            "messaging_outbox_parked", "Outbox rows parked after repeated refusals.", value=backlog.parked
        )
        yield GaugeMetricFamily(
            "messaging_scheduled_messages",
            "Messages published for later delivery (publish(deliver_at=...)), not yet due or not yet moved.",
            value=scheduled.scheduled,
        )
        yield GaugeMetricFamily(
            "messaging_scheduled_oldest_overdue_seconds",
            "How long the most overdue scheduled message has waited past its time for a relay to "
            "move it into the outbox (0 when none).",
            value=scheduled.oldest_overdue_seconds,
        )
        dead = GaugeMetricFamily(
            "messaging_dead_letters",
            "Dead letters stored, per consumer: waiting for an operator, or replayed since they failed.",
            labels=["consumer", "state"],
        )
        for consumer in local_consumers():
            for state in ("waiting", "replayed"):
                dead.add_metric([consumer, state], letters.get((consumer, state), 0))
        yield dead
        # One series per consumer at most (its oldest waiting dead letter), so the labels stay
        # bounded. No message or correlation id: they lead to the order, and metrics travel further
        # than the admin (`manage.py dead_letters list` names the dead letter).
        oldest = GaugeMetricFamily(
            "messaging_dead_letter_oldest_waiting_age_seconds",
            "Per consumer, how long its oldest waiting dead letter has waited, labelled with its "
            "reason; no series when none waits.",
            labels=["consumer", "reason"],
        )
        for letter in oldest_letters:
            oldest.add_metric([letter.consumer, letter.reason], letter.age_seconds)
        yield oldest
        yield from contexts


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


def bearer_token(request) -> str | None:
    """The credentials of ``Authorization: Bearer <token>``; the scheme is case-insensitive
    (RFC 7235), so ``bearer`` and ``BEARER`` count too."""
    scheme, _, credentials = request.headers.get("Authorization", "").strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def metrics_view(request):
    token = settings.METRICS_TOKEN
    if not token and not settings.METRICS_PUBLIC:  # DEBUG off, and no one said who may read them
        return HttpResponse(
            "/metrics is not public with DEBUG off: set METRICS_TOKEN and scrape with "
            "'Authorization: Bearer <token>' (or METRICS_PUBLIC=1 to serve it to anyone)\n",
            status=403,
            content_type="text/plain",
        )
    if token and not constant_time_compare(bearer_token(request) or "", token):
        return HttpResponse(
            "unauthorized\n", status=401, content_type="text/plain", headers={"WWW-Authenticate": "Bearer"}
        )
    return HttpResponse(generate_latest(_exposition), content_type=CONTENT_TYPE_LATEST)
