"""Recording handled messages, in the same transaction as the work they cause."""

from django.db import connection
from django.utils import timezone

from messaging.envelope import IncomingEvent
from messaging.models import InboxMessage

_INSERT = (
    f"INSERT INTO {InboxMessage._meta.db_table} (consumer, message_id, event_type, correlation_id, handled_at) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (consumer, message_id) DO NOTHING"
)


def inbox_claim(*, consumer: str, event: IncomingEvent) -> bool:
    """Insert the inbox row; False when this consumer has handled the message already.

    One statement: a concurrent duplicate waits for the first transaction and then finds
    the conflict; if the first rolls back, the duplicate goes ahead.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            _INSERT,
            [consumer, event.message_id, event.event_type[:200], event.correlation_id[:100], timezone.now()],
        )
        return cursor.rowcount == 1
