from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from reliable_messaging._backfill import BackfillRefused, backfill


class Command(BaseCommand):
    help = (
        "Send the events of one type that the event log holds to one consumer's queue only (a context "
        "that joined later), with their original message ids: run it where the event log is. Refused for events "
        "older than INBOX_RETENTION unless --past-inbox-retention says the consumer never had them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_type", help="<context>.<aggregate>.<event>, as the event log holds it")
        parser.add_argument("--to", dest="consumer", required=True, help="the consumer whose queue receives them")
        parser.add_argument("--since", default=None, help="only those that occurred at or after (ISO 8601)")
        parser.add_argument(
            "--past-inbox-retention",
            action="store_true",
            help="send those older than INBOX_RETENTION too: only for a consumer that never had them",
        )

    def handle(
        self,
        *args: Any,
        event_type: str,
        consumer: str,
        since: str | None = None,
        past_inbox_retention: bool = False,
        **options: Any,
    ) -> None:
        when = parse_datetime(since) if since else None
        if since and (when is None or when.tzinfo is None):
            raise CommandError(f"--since {since!r}: an ISO 8601 time with its offset, e.g. 2026-11-26T10:00:00+00:00")
        try:
            result = backfill(
                event_type=event_type, consumer=consumer, since=when, past_inbox_retention=past_inbox_retention
            )
        except (BackfillRefused, ConnectionError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{result.sent} {event_type} sent to {result.queue}")
        for message_id, reason in sorted(result.failed.items()):
            self.stderr.write(f"not sent: {message_id}: {reason}")
        if result.failed:
            raise CommandError(f"{len(result.failed)} not sent (is {result.queue} declared? prepare_deployment)")
