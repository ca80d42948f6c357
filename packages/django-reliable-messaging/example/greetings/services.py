import uuid
from datetime import datetime

from django.db import transaction
from reliable_messaging.api import publish


def send_greeting(to: str, text: str, *, deliver_at: datetime | None = None) -> uuid.UUID:
    """Announce a greeting (scheduled for ``deliver_at``, if given): the event goes to the outbox
    in this transaction, with whatever the context changes in its own tables."""
    greeting_id = str(uuid.uuid4())
    with transaction.atomic():
        return publish(
            event_type="greetings.greeting.sent",
            payload={"greeting_id": greeting_id, "to": to, "text": text},
            aggregate_type="greeting",
            aggregate_id=greeting_id,
            correlation_id=greeting_id,
            deliver_at=deliver_at,
        )
