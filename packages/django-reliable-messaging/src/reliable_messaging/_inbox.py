"""Recording handled messages, in the same transaction as the work they cause."""

from datetime import datetime
from typing import Any

from django.utils import timezone

from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._sql import Statement, execute_together, insert_rows, insert_statement
from reliable_messaging.models import InboxMessage


def inbox_claim(*, consumer: str, event: IncomingEvent) -> bool:
    """Insert the inbox row; False when this consumer has handled the message already.

    One statement: a concurrent duplicate waits for the first transaction and then finds
    the conflict; if the first rolls back, the duplicate goes ahead.
    """
    return execute_together([_claim_statement(consumer, event)]) == 1


def inbox_claim_many(*, consumer: str, events: list[IncomingEvent]) -> set[str]:
    """Insert the inbox rows of ``events`` (distinct message ids) in one statement; the message
    ids this consumer had not handled yet."""
    now = timezone.now()
    rows = [_row(consumer, event, now) for event in events]
    return insert_rows(InboxMessage, rows, ignore_conflict_on=("consumer", "message_id"), returning="message_id")


def inbox_claim_in_savepoint(*, consumer: str, event: IncomingEvent, savepoint: str, release: str | None) -> bool:
    """``inbox_claim`` inside a new savepoint, in one round trip with it (PostgreSQL): the savepoint
    is opened, the one before it (``release``) released, and the row inserted by one execute.
    False when this consumer has handled the message already."""
    statements: list[Statement] = [(f"RELEASE SAVEPOINT {release}", [])] if release else []
    statements += [(f"SAVEPOINT {savepoint}", []), _claim_statement(consumer, event)]
    return execute_together(statements) == 1


def inbox_hashes(*, consumer: str, message_ids: list[str]) -> dict[str, str]:
    """The content hash each of ``message_ids`` was handled with by ``consumer`` ("" when unknown)."""
    if not message_ids:
        return {}
    rows = InboxMessage.objects.filter(consumer=consumer, message_id__in=message_ids)
    return dict(rows.values_list("message_id", "content_hash"))


def _claim_statement(consumer: str, event: IncomingEvent) -> Statement:
    values = _row(consumer, event, timezone.now())
    return insert_statement(InboxMessage, values, ignore_conflict_on=("consumer", "message_id"))


def _row(consumer: str, event: IncomingEvent, handled_at: datetime) -> dict[str, Any]:
    return {
        "consumer": consumer,
        "message_id": event.message_id,
        "event_type": event.event_type[:200],
        "correlation_id": event.correlation_id[:100],
        "handled_at": handled_at,
        "content_hash": event.content_hash,
    }
