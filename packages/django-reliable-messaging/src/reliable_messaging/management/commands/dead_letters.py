import json

from django.core.management.base import BaseCommand, CommandError

from reliable_messaging._dead_letters import (
    dead_letter_display_body,
    dead_letter_purge,
    dead_letter_replay,
    dead_letter_replay_all,
    dead_letters_list,
    recorded_producer,
)
from reliable_messaging._masking import mask_sensitive, mask_text
from reliable_messaging._topology import consumers
from reliable_messaging.models import DeadLetter

LIST_COLUMNS = ("id", "consumer", "correlation", "message_id", "reason", "state")


def list_row(letter: DeadLetter) -> tuple[str, ...]:
    """``message_id`` as received."""
    state = f"replayed {letter.replayed_at:%Y-%m-%d %H:%M:%S}" if letter.replayed_at else "waiting"
    return str(letter.pk), letter.consumer, letter.correlation_id or "-", letter.message_id or "-", letter.reason, state


def table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell, two spaces apart (the last one unpadded)."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = (
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    )
    return "\n".join(lines)


def as_json(letter: DeadLetter) -> str:
    return json.dumps(
        {
            "id": letter.pk,
            "consumer": letter.consumer,
            "correlation_id": letter.correlation_id or None,
            "message_id": letter.message_id or None,
            "event_type": letter.event_type,
            "reason": letter.reason,
            "attempts": letter.attempts,
            "last_failed_at": letter.last_failed_at.isoformat(),
            "replayed_at": letter.replayed_at.isoformat() if letter.replayed_at else None,
        }
    )


class Command(BaseCommand):
    help = "Inspect, replay and purge dead letters: list | show ID | replay ID... | replay --all | purge ID..."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser(
            "list",
            help="a table, one row per dead letter: id, consumer, correlation (its id), message_id, reason, "
            "state (waiting or replayed)",
        )
        listing.add_argument("--consumer", choices=consumers())
        listing.add_argument("--waiting", action="store_true", help="only those not replayed since they failed")
        listing.add_argument(
            "--json", action="store_true", dest="json_lines", help="for scripts: one JSON object per line, no header"
        )
        show = actions.add_parser("show", help="everything about one dead letter")
        show.add_argument("id", type=int)
        replay = actions.add_parser(
            "replay",
            help="republish to the original consumer only; with BROKER_PRODUCERS, only a dead letter whose "
            "recorded producer (user_id) owns its event type or is this deployment's user",
        )
        replay.add_argument("ids", nargs="*", type=int, metavar="ID")
        replay.add_argument("--all", action="store_true", help="every dead letter not replayed since it failed")
        replay.add_argument("--consumer", choices=consumers(), help="with --all: only this consumer's")
        replay.add_argument("--new-id", action="store_true", help="a new message_id: the message runs again")
        purge = actions.add_parser("purge", help="delete dead letters")
        purge.add_argument("ids", nargs="+", type=int, metavar="ID")

    def handle(self, *args, action, **options):
        getattr(self, f"_{action}")(**options)

    def _list(self, consumer=None, waiting=False, json_lines=False, **options):
        # Everything on stdout, unstyled: stderr is Django's error style (bold red), and a header
        # there reads as an error and interleaves with the rows under 2>&1.
        letters = list(dead_letters_list(consumer=consumer, waiting=waiting))
        if json_lines:
            for letter in letters:
                self.stdout.write(as_json(letter))
        elif letters:
            self.stdout.write(table(LIST_COLUMNS, [list_row(letter) for letter in letters]))
        else:
            which = " waiting" if waiting else ""
            self.stdout.write(f"no{which} dead letters{f' for {consumer}' if consumer else ''}")

    def _show(self, id, **options):
        letter = DeadLetter.objects.filter(pk=id).first()
        if letter is None:
            raise CommandError(f"no dead letter {id}")
        fields = {
            "id": letter.pk,
            "consumer": letter.consumer,
            "message_id": letter.message_id or "-",
            "event_type": letter.event_type,
            "routing_key": letter.routing_key,
            "producer": recorded_producer(letter) or "-",  # the AMQP user_id RabbitMQ delivered it with
            "correlation_id": letter.correlation_id,
            "reason": letter.reason,
            "error": mask_text(letter.error),
            "attempts": letter.attempts,
            "first_failed_at": letter.first_failed_at.isoformat(),
            "last_failed_at": letter.last_failed_at.isoformat(),
            "replayed_at": letter.replayed_at.isoformat() if letter.replayed_at else None,
            "replay_count": letter.replay_count,
        }
        for name, value in fields.items():
            self.stdout.write(f"{name:16} {value}")
        self.stdout.write("headers:\n" + json.dumps(mask_sensitive(letter.headers), indent=2, sort_keys=True))
        self.stdout.write("body:\n" + dead_letter_display_body(letter))
        if letter.traceback:
            self.stdout.write("traceback:\n" + mask_text(letter.traceback))

    def _replay(self, ids=(), all=False, consumer=None, new_id=False, **options):
        if all == bool(ids):
            raise CommandError("name the dead letters (ID ...) or pass --all, not both")
        if consumer and not all:
            raise CommandError("--consumer goes with --all")
        outcomes = (
            dead_letter_replay_all(consumer=consumer, new_id=new_id)
            if all
            else dead_letter_replay(ids=list(ids), new_id=new_id)
        )
        for outcome in outcomes:
            status = "replayed" if outcome.replayed else "NOT replayed"
            note = f": {outcome.note}" if outcome.note else ""
            self.stdout.write(f"{outcome.dead_letter_id}\t{outcome.consumer}\t{outcome.message_id}\t{status}{note}")
        if any(not o.replayed for o in outcomes):
            raise SystemExit(1)

    def _purge(self, ids, **options):
        self.stdout.write(f"{dead_letter_purge(ids=list(ids))} dead letter(s) purged")
