"""Recording handled messages, in the same transaction as the work they cause."""

from django.utils import timezone

from kernel.sql import insert_row, insert_rows_returning
from messaging.envelope import IncomingEvent
from messaging.models import InboxMessage


def inbox_claim(*, consumer: str, event: IncomingEvent) -> bool:
    """Insert the inbox row; False when this consumer has handled the message already.

    One statement: a concurrent duplicate waits for the first transaction and then finds
    the conflict; if the first rolls back, the duplicate goes ahead.
    """
    return insert_row(
        InboxMessage,
        {
            "consumer": consumer,
            "message_id": event.message_id,
            "event_type": event.event_type[:200],
            "correlation_id": event.correlation_id[:100],
            "handled_at": timezone.now(),
        },
        ignore_conflict_on=("consumer", "message_id"),
    )


def inbox_claim_many(*, consumer: str, events: list[IncomingEvent]) -> set[str]:
    """Insert the inbox rows of ``events`` (distinct message ids) in one statement; the message
    ids this consumer had not handled yet."""
    now = timezone.now()
    rows = [
        {
            "consumer": consumer,
            "message_id": event.message_id,
            "event_type": event.event_type[:200],
            "correlation_id": event.correlation_id[:100],
            "handled_at": now,
        }
        for event in events
    ]
    return insert_rows_returning(
        InboxMessage, rows, ignore_conflict_on=("consumer", "message_id"), returning="message_id"
    )
