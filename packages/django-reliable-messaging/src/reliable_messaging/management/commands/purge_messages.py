from typing import Any

from django.core.management.base import BaseCommand

from reliable_messaging._housekeeping import messages_purge


class Command(BaseCommand):
    help = (
        "Delete published outbox rows, inbox rows, event-log rows and dead letters past their retention "
        "(OUTBOX_RETENTION, INBOX_RETENTION, EVENT_LOG_RETENTION, DEAD_LETTER_RETENTION, "
        "REPLAYED_DEAD_LETTER_RETENTION), then the payloads stored apart (CLAIM_CHECK_BYTES) no row refers to any "
        "more. Never a pending or parked row. The relay does it every HOUSEKEEPING_INTERVAL."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"deleted: {messages_purge()}")
