"""Payments' reads for operators: the gateway calls in flight and how overdue the oldest is."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min, Q

from payments.models import Payment


@dataclass(frozen=True)
class GatewayCalls:
    charging: int
    refunding: int
    failing: int  # in flight, and the last try failed (call_error says why)
    oldest_overdue_seconds: float  # 0 when no call is past its due time


def gateway_calls_summary(now: datetime) -> GatewayCalls:
    """One indexed aggregate. A claimed call's due time is its lease's end, so a call past it is
    one no gateway worker has taken: none runs, or all its threads are busy."""
    row = Payment.objects.filter(status__in=[Payment.Status.CHARGING, Payment.Status.REFUNDING]).aggregate(
        charging=Count("pk", filter=Q(status=Payment.Status.CHARGING)),
        refunding=Count("pk", filter=Q(status=Payment.Status.REFUNDING)),
        failing=Count("pk", filter=~Q(call_error="")),
        oldest_due=Min("call_due_at"),
    )
    oldest_due = row["oldest_due"]
    overdue = (now - oldest_due).total_seconds() if oldest_due is not None and oldest_due < now else 0.0
    return GatewayCalls(row["charging"], row["refunding"], row["failing"], overdue)
