from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reliable_messaging._housekeeping import outbox_retry_parked


class Command(BaseCommand):
    help = "Give parked outbox rows (refused by the broker too often) a fresh set of attempts."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ids", nargs="*", type=int, metavar="ID", help="outbox row ids")
        parser.add_argument("--all", action="store_true", help="every parked row")

    def handle(self, *args: Any, ids: Sequence[int] = (), all: bool = False, **options: Any) -> None:
        if not ids and not all:
            raise CommandError("name the parked rows (ID ...) or pass --all")
        count = outbox_retry_parked(ids=None if all else list(ids))
        self.stdout.write(f"{count} parked row(s) will be published again")
