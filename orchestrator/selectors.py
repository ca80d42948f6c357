"""The orchestrator's reads."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min
from reliable_messaging.api import scheduled_delivery_time
from reliable_messaging.sagas import definition

from orchestrator.models import OrderSaga
from orchestrator.services import NAME


def saga_deadline(saga: OrderSaga) -> datetime | None:
    """When the step waiting now is given up on or sent again (its scheduled deadline), if any."""
    return scheduled_delivery_time(saga.deadline_id) if saga.deadline_id else None


def waiting_for(saga: OrderSaga) -> str:
    """The command whose reply the saga waits for ("" when it waits for none)."""
    step = definition(NAME, saga.definition_version).steps.get(saga.state)
    return step.command if step else ""


def step_keys_in_order(saga: OrderSaga) -> list[tuple[str, str]]:
    """(command, its key), in the order the steps run: PostgreSQL keeps a JSON object's keys in an
    order of its own."""
    commands = definition(NAME, saga.definition_version).commands
    return [(command, saga.step_keys.get(command, "-")) for command in commands]


@dataclass(frozen=True)
class SagasWaiting:
    by_status: dict[str, int]  # every waiting state, 0 included
    oldest_waiting_seconds: float  # since the saga waiting longest entered its state; 0 when none waits


def sagas_waiting(now: datetime) -> SagasWaiting:
    """The sagas waiting for a participant, by state, and how long the one waiting longest has been
    in its state (its step's retries included)."""
    waiting_states = list(definition(NAME).steps)
    rows = (
        OrderSaga.objects.filter(state__in=waiting_states)
        .values("state")
        .annotate(n=Count("pk"), since=Min("step_since"))
    )
    by_status = dict.fromkeys(waiting_states, 0)
    oldest = None
    for row in rows:
        by_status[row["state"]] = row["n"]
        oldest = row["since"] if oldest is None else min(oldest, row["since"])
    waited = (now - oldest).total_seconds() if oldest is not None and oldest < now else 0.0
    return SagasWaiting(by_status, waited)
