"""Prometheus metrics of the relay and the consumers (prometheus_client, the extra ``metrics``;
without it nothing is counted and nothing else changes).

Counters and histograms live in the process that does the work; each long-running command
can serve its own registry on a port (``--metrics-port``). The web process's ``/metrics``
adds gauges read from the database (outbox backlog, parked rows, dead letters).
"""

import functools
from typing import TYPE_CHECKING, Any

from reliable_messaging._declarations import installed

if TYPE_CHECKING:  # checked against prometheus_client's API, which the stand-in below follows
    from prometheus_client import Counter, Gauge, Histogram
else:
    try:  # the extra "metrics"
        from prometheus_client import Counter, Gauge, Histogram
    except ImportError:  # counted nowhere: the bus works the same

        class Counter:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                pass

            def labels(self, *values: str) -> "Counter":
                return self

            def inc(self, amount: float = 1) -> None:
                pass

            def observe(self, amount: float) -> None:
                pass

            def set(self, value: float) -> None:
                pass

        Histogram = Gauge = Counter

RELAY_PUBLISHED = Counter("messaging_relay_published_total", "Outbox rows published and confirmed by the broker.")
PURGED = Counter("messaging_purged_total", "Rows past their retention purged by the relay's housekeeping.", ["table"])
RELAY_REFUSED = Counter("messaging_relay_refused_total", "Outbox rows the broker returned or nacked.", ["reason"])
RELAY_BATCH_SECONDS = Histogram(
    "messaging_relay_batch_seconds",
    "Time to claim, publish, confirm and mark one batch.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CONSUMER_MESSAGES = Counter(
    "messaging_consumer_messages_total",
    "Deliveries by consumer, event type and outcome (handled, duplicate, retry, dead_letter, database_down).",
    ["consumer", "event_type", "outcome"],
)
CONSUMER_SECONDS = Histogram(
    "messaging_consumer_handle_seconds",
    "Time to decide and settle one delivery.",
    ["consumer"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)

CONSUMER_BATCH_SIZE = Histogram(
    "messaging_consumer_batch_size",
    "Deliveries decided together in one transaction (1 at light load).",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200),
)
CONSUMER_WAITS = Counter(
    "messaging_consumer_waits_total",
    "Deliveries sent back unattempted: a retry before its time (waiting), a handler's breaker open (breaker).",
    ["consumer", "reason"],
)
DEAD_LETTERS_NOT_STORED = Counter(
    "messaging_dead_letters_not_stored_total",
    "Refusals of hostile input beyond DEAD_LETTER_FLOOD_LIMIT of their consumer and reason in a window: "
    "counted (messaging_dead_letter_flood), not stored as dead letters.",
    ["consumer", "reason"],
)
BREAKER_OPEN = Gauge(
    "messaging_breaker_open",
    "1 while a handler's circuit breaker is open in this consumer process (its messages wait), else 0.",
    ["consumer", "handler"],
)


def relay_batch(published: int, refused: dict[str, str], seconds: float) -> None:
    RELAY_PUBLISHED.inc(published)
    for reason in refused.values():
        RELAY_REFUSED.labels("returned" if "returned" in reason else "nacked").inc()
    RELAY_BATCH_SECONDS.observe(seconds)


def consumer_message(consumer: str, event_type: str, outcome: str, seconds: float) -> None:
    CONSUMER_MESSAGES.labels(consumer, event_type_label(event_type), outcome).inc()
    CONSUMER_SECONDS.labels(consumer).observe(seconds)


def event_type_label(event_type: str) -> str:
    """``event_type`` when an installed context publishes it, else ``other``: a label per header
    value a producer makes up would grow the registry (and every scrape) without bound."""
    return event_type if event_type in _declared_event_types() else "other"


@functools.cache
def _declared_event_types() -> frozenset[str]:
    return frozenset(key for declaration in installed() for key in declaration.publishes)


def consumer_batch(size: int) -> None:
    CONSUMER_BATCH_SIZE.observe(size)


def consumer_wait(consumer: str, reason: str) -> None:
    CONSUMER_WAITS.labels(consumer, reason).inc()


def breaker_open(consumer: str, handler: str, is_open: bool) -> None:
    BREAKER_OPEN.labels(consumer, handler).set(1 if is_open else 0)


def dead_letter_not_stored(consumer: str, reason: str) -> None:
    DEAD_LETTERS_NOT_STORED.labels(consumer, reason).inc()
