"""The orchestrator's reads."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min
from reliable_messaging.api import scheduled_delivery_time

from orchestrator.models import OrderSaga
from orchestrator.services import ACTIVE, STEPS


def saga_deadline(saga: OrderSaga) -> datetime | None:
    """When the step waiting now is given up on or sent again (its scheduled deadline), if any."""
    return scheduled_delivery_time(saga.deadline_id) if saga.deadline_id else None


def step_keys_in_order(saga: OrderSaga) -> list[tuple[str, str, str]]:
    """(step, its command, its key), in the order the steps run: PostgreSQL keeps a JSON object's
    keys in an order of its own."""
    return [(step.key, step.command, saga.step_keys.get(step.key, "-")) for step in STEPS.values()]


@dataclass(frozen=True)
class SagasWaiting:
    by_status: dict[str, int]  # every waiting state, 0 included
    oldest_waiting_seconds: float  # since the saga waiting longest entered its state; 0 when none waits


def sagas_waiting(now: datetime) -> SagasWaiting:
    """The sagas waiting for a participant, by state, and how long the one waiting longest has been
    in its state (its step's retries included)."""
    waiting = OrderSaga.objects.filter(status__in=ACTIVE)
    rows = waiting.values("status").annotate(n=Count("pk"), since=Min("step_since"))
    by_status = {status: 0 for status in ACTIVE}
    oldest = None
    for row in rows:
        by_status[row["status"]] = row["n"]
        oldest = row["since"] if oldest is None else min(oldest, row["since"])
    waited = (now - oldest).total_seconds() if oldest is not None and oldest < now else 0.0
    return SagasWaiting(by_status, waited)
