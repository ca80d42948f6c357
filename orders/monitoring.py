"""Orders' reads for operators: the overview page and the metrics endpoint."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min, QuerySet
from django.db.models.functions import TruncMinute
from django.utils import timezone

from orders.models import Order


def orders_status_counts(*, since: datetime) -> dict[str, int]:
    """Orders created since ``since`` by status, every status present (zero if none)."""
    counts = dict(
        Order.objects.filter(created_at__gte=since)
        .values_list("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    return {status: counts.get(status, 0) for status in Order.Status.values}


def orders_pending_longer_than(*, seconds: float) -> QuerySet[Order]:
    """Orders still PENDING ``seconds`` after checkout, oldest first."""
    cutoff = timezone.now() - timedelta(seconds=seconds)
    return Order.objects.filter(status=Order.Status.PENDING, created_at__lt=cutoff).order_by("created_at")


@dataclass(frozen=True)
class PendingOrders:
    """PENDING orders: how many, how many of them are stuck, and the oldest one's age."""

    pending: int
    stuck: int  # PENDING for longer than the ``stuck_after`` asked for
    oldest_age: float  # seconds; 0.0 when none is PENDING


def orders_pending_summary(*, stuck_after: float) -> PendingOrders:
    """PENDING orders: how many, how many older than ``stuck_after`` seconds, the oldest's age."""
    now = timezone.now()
    pending = Order.objects.filter(status=Order.Status.PENDING)
    stats = pending.aggregate(count=Count("id"), oldest=Min("created_at"))
    return PendingOrders(
        pending=stats["count"],
        stuck=pending.filter(created_at__lt=now - timedelta(seconds=stuck_after)).count(),
        oldest_age=(now - stats["oldest"]).total_seconds() if stats["oldest"] else 0.0,
    )


def orders_per_minute(*, until: datetime, minutes: int = 60) -> tuple[list[datetime], dict[str, list[int]]]:
    """Orders by minute of checkout and by the status they have now, over the last ``minutes``
    minutes (the current one last): the minutes, and a count per minute for each status."""
    end = until.replace(second=0, microsecond=0)
    buckets = [end - timedelta(minutes=minutes - 1 - i) for i in range(minutes)]
    index = {bucket: i for i, bucket in enumerate(buckets)}
    series = {status: [0] * minutes for status in Order.Status.values}
    rows = (
        Order.objects.filter(created_at__gte=buckets[0])
        .annotate(minute=TruncMinute("created_at"))
        .values("minute", "status")
        .annotate(n=Count("id"))
    )
    for row in rows:
        if (i := index.get(row["minute"])) is not None:
            series[row["status"]][i] += row["n"]
    return buckets, series
