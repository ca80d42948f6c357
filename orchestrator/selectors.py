"""The orchestrator's reads."""

from datetime import datetime

from messaging.api import scheduled_delivery_time
from orchestrator.models import OrderSaga


def saga_deadline(saga: OrderSaga) -> datetime | None:
    """When the step waiting now is given up on or sent again (its scheduled deadline), if any."""
    return scheduled_delivery_time(saga.deadline_id) if saga.deadline_id else None
