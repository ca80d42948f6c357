from django.core.management.base import BaseCommand

from reliable_messaging.housekeeping import messages_purge


class Command(BaseCommand):
    help = (
        "Delete published outbox rows, inbox rows and event-log rows past their retention "
        "(OUTBOX_RETENTION, INBOX_RETENTION, EVENT_LOG_RETENTION). Never a pending or parked row."
    )

    def handle(self, *args, **options):
        result = messages_purge()
        self.stdout.write(f"deleted: outbox {result.outbox}, inbox {result.inbox}, event log {result.event_log}")
