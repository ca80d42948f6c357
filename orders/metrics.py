"""Saga outcomes as Prometheus metrics, observed where the order's outcome is decided.

Confirmation and failure are decided in the ``orders`` consumer and the saga-deadline loop,
cancellation in the web process: each process counts its own decisions (scrape them all
and sum). A decision counts once its transaction commits, so a rolled-back handler that is
retried later is not counted twice.
"""

from django.db import transaction
from django.utils import timezone
from prometheus_client import Counter, Histogram

from orders.models import Order

SAGA_OUTCOMES = Counter(
    "orders_saga_outcomes_total",
    "Orders that reached an outcome, by status and failure reason (none for confirmed and cancelled).",
    ["status", "reason"],
)
CHECKOUT_TO_TERMINAL_SECONDS = Histogram(
    "orders_checkout_to_terminal_seconds",
    "From checkout to the first outcome (confirmed, failed or cancelled while pending).",
    ["status"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
)


def saga_outcome_observed(*, order: Order, previous_status: str) -> None:
    """Count ``order``'s new status once the transaction that set it commits."""
    status, reason = order.status, order.failure_reason or "none"
    latency = (timezone.now() - order.created_at).total_seconds()

    def observe() -> None:
        SAGA_OUTCOMES.labels(status, reason).inc()
        if previous_status == Order.Status.PENDING:
            CHECKOUT_TO_TERMINAL_SECONDS.labels(status).observe(latency)

    transaction.on_commit(observe)


EVENTS_IGNORED = Counter(
    "orders_events_ignored_total",
    "Well-formed events the saga cannot have caused (an unknown order, a stock outcome before any payment, "
    "amounts or lines that are not the order's): acked with a warning, no effect.",
    ["event", "reason"],
)


def event_ignored_observed(*, event: str, reason: str) -> None:
    """Count an ignored event once the transaction that decided it commits (a batch may run twice)."""
    transaction.on_commit(lambda: EVENTS_IGNORED.labels(event, reason).inc())
