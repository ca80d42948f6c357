import getpass
import json
import os
import sys
from argparse import ArgumentParser
from datetime import UTC, datetime
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Exists, OuterRef

from reliable_messaging._dead_letters import (
    DeadLetterSelection,
    EditRefused,
    ReplayOutcome,
    dead_letter_display_body,
    dead_letter_edit,
    dead_letter_payload_text,
    dead_letter_purge,
    dead_letter_redrive,
    dead_letter_replay,
    dead_letter_replay_all,
    dead_letters_list,
    describe_change,
    recorded_producer,
)
from reliable_messaging._masking import mask_sensitive, mask_text
from reliable_messaging._topology import consumers
from reliable_messaging.models import DeadLetter, DeadLetterEdit

LIST_COLUMNS = ("id", "consumer", "correlation", "message_id", "reason", "state")


def list_row(letter: DeadLetter) -> tuple[str, ...]:
    """``message_id`` as received; an edited one waiting says so (its replay is the edit)."""
    if letter.replayed_at:
        state = f"replayed {letter.replayed_at:%Y-%m-%d %H:%M:%S}"
    else:
        state = "waiting, edited" if getattr(letter, "edited", False) else "waiting"
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


def moment(text: str) -> datetime:
    """An ISO 8601 date and time (``2026-11-24T17:00:00+01:00``, ``...Z``, or a date); without an
    offset, UTC (the time every page and list here shows)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"{text!r} is not an ISO 8601 date and time (such as 2026-11-24T17:00:00Z)") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def operator_name() -> str:
    """Who runs the command, as the OS knows them (an edit's audit record names them)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no such user in the passwd file (a container's random uid)
        return f"uid {os.getuid()}"


def replay_line(outcome: ReplayOutcome) -> str:
    status = "replayed" if outcome.replayed else "NOT replayed"
    note = f": {outcome.note}" if outcome.note else ""
    return f"{outcome.dead_letter_id}\t{outcome.consumer}\t{outcome.message_id}\t{status}{note}"


def edit_lines(edit: DeadLetterEdit) -> list[str]:
    replayed = f", replayed as {edit.replayed_as} at {edit.replayed_at:%Y-%m-%d %H:%M:%S}" if edit.replayed_at else ""
    head = f"edit #{edit.pk} {edit.edited_at:%Y-%m-%d %H:%M:%S} by {edit.edited_by} (via {edit.via}){replayed}"
    return [head, *(f"  {describe_change(change)}" for change in edit.diff)]


class Command(BaseCommand):
    help = (
        "Inspect, edit, replay and purge dead letters: list | show ID | edit ID | replay ID... | replay --all | "
        "redrive [filters] | purge ID..."
    )
    stealth_options = ("stdin",)

    def add_arguments(self, parser: ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        listing = actions.add_parser(
            "list",
            help="a table, one row per dead letter: id, consumer, correlation (its id), message_id, reason, "
            "state (waiting, waiting and edited, or replayed)",
        )
        listing.add_argument("--consumer", choices=consumers())
        listing.add_argument("--waiting", action="store_true", help="only those not replayed since they failed")
        listing.add_argument(
            "--json", action="store_true", dest="json_lines", help="for scripts: one JSON object per line, no header"
        )
        show = actions.add_parser("show", help="everything about one dead letter, its edits included")
        show.add_argument("id", type=int)
        edit = actions.add_parser(
            "edit",
            help="replace the payload a replay publishes (the body as received is kept): a JSON object from "
            "--payload-file or stdin, checked as its consumer checks a message (its schema for its version); "
            "prints the diff; exit 1 with the reason when refused, nothing changed",
        )
        edit.add_argument("id", type=int)
        edit.add_argument("--payload-file", metavar="FILE", help="the new payload (JSON); without it, stdin")
        edit.add_argument(
            "--print",
            action="store_true",
            dest="print_payload",
            help="print the payload a replay would publish now (sensitive fields masked: left so, they are kept) "
            "and change nothing",
        )
        edit.add_argument("--replay", action="store_true", help="then replay it (as a new message)")
        edit.add_argument("--by", help="who edits, for the audit record (default: the OS user)")
        replay = actions.add_parser(
            "replay",
            help="republish to the original consumer only; with BROKER_PRODUCERS, only a dead letter whose "
            "recorded producer (user_id) owns its event type or is this deployment's user; an edited one "
            "publishes its newest edit as a new message",
        )
        replay.add_argument("ids", nargs="*", type=int, metavar="ID")
        replay.add_argument("--all", action="store_true", help="every dead letter not replayed since it failed")
        replay.add_argument("--consumer", choices=consumers(), help="with --all: only this consumer's")
        replay.add_argument("--new-id", action="store_true", help="a new message_id: the message runs again")
        redrive = actions.add_parser(
            "redrive",
            help="replay the waiting dead letters the filters select (all of them together), as replay does, "
            "in batches; exit 1 if any was refused",
        )
        redrive.add_argument("--consumer", choices=consumers())
        redrive.add_argument("--reason", help="exactly this reason (handler_error, invalid_payload, ...)")
        redrive.add_argument("--event-type", help="exactly this event type (routing key)")
        redrive.add_argument(
            "--since", type=str, metavar="T", help="last failed at or after T (ISO 8601; without offset: UTC)"
        )
        redrive.add_argument("--until", type=str, metavar="T", help="last failed before T (ISO 8601)")
        redrive.add_argument("--all", action="store_true", help="no filter: every waiting dead letter")
        redrive.add_argument("--new-id", action="store_true", help="a new message_id: the messages run again")
        redrive.add_argument(
            "--dry-run", action="store_true", help="say what would be replayed (and refused), change nothing"
        )
        purge = actions.add_parser("purge", help="delete dead letters (their edits with them)")
        purge.add_argument("ids", nargs="+", type=int, metavar="ID")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        getattr(self, f"_{action}")(**options)

    def _list(
        self, consumer: str | None = None, waiting: bool = False, json_lines: bool = False, **options: Any
    ) -> None:
        # Everything on stdout, unstyled: stderr is Django's error style (bold red), and a header
        # there reads as an error and interleaves with the rows under 2>&1.
        edited = Exists(DeadLetterEdit.objects.filter(dead_letter=OuterRef("pk")))
        letters = list(dead_letters_list(consumer=consumer, waiting=waiting).annotate(edited=edited))
        if json_lines:
            for letter in letters:
                self.stdout.write(as_json(letter))
        elif letters:
            self.stdout.write(table(LIST_COLUMNS, [list_row(letter) for letter in letters]))
        else:
            which = " waiting" if waiting else ""
            self.stdout.write(f"no{which} dead letters{f' for {consumer}' if consumer else ''}")

    def _letter(self, id: int) -> DeadLetter:
        letter = DeadLetter.objects.filter(pk=id).first()
        if letter is None:
            raise CommandError(f"no dead letter {id}")
        return letter

    def _show(self, id: int, **options: Any) -> None:
        letter = self._letter(id)
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
        edits = list(DeadLetterEdit.objects.filter(dead_letter=letter).order_by("id"))
        if edits:
            self.stdout.write("edits:")
            for edit in edits:
                self.stdout.write("\n".join(edit_lines(edit)))
            self.stdout.write("payload a replay publishes (the newest edit):\n" + dead_letter_payload_text(letter))

    def _edit(
        self,
        id: int,
        payload_file: str | None = None,
        print_payload: bool = False,
        replay: bool = False,
        by: str | None = None,
        stdin: TextIO | None = None,
        **options: Any,
    ) -> None:
        letter = self._letter(id)
        if print_payload:
            self.stdout.write(dead_letter_payload_text(letter))
            return
        text = self._payload_text(payload_file, stdin or sys.stdin)
        try:
            edit = dead_letter_edit(letter.pk, text, by=by or operator_name(), via="command")
        except EditRefused as refused:
            raise CommandError(f"dead letter {letter.pk}: edit refused: {_one_line(str(refused))}") from None
        self.stdout.write("\n".join(edit_lines(edit)))
        if not replay:
            self.stdout.write(f"its replay publishes this edit, as a new message: dead_letters replay {letter.pk}")
            return
        [outcome] = dead_letter_replay(ids=[letter.pk])
        self.stdout.write(replay_line(outcome))
        if not outcome.replayed:
            raise CommandError(f"dead letter {letter.pk}: edited, NOT replayed: {_one_line(outcome.note)}")

    def _payload_text(self, payload_file: str | None, stdin: TextIO) -> str:
        if payload_file:
            try:
                with open(payload_file, encoding="utf-8") as given:
                    return given.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise CommandError(f"--payload-file {payload_file}: {exc}") from None
        if stdin.isatty():
            raise CommandError("give the new payload: --payload-file FILE, or JSON on stdin (edit ID --print shows it)")
        return stdin.read()

    def _replay(
        self,
        ids: tuple[int, ...] = (),
        all: bool = False,
        consumer: str | None = None,
        new_id: bool = False,
        **options: Any,
    ) -> None:
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
            self.stdout.write(replay_line(outcome))
        if any(not o.replayed for o in outcomes):
            raise SystemExit(1)

    def _redrive(
        self,
        consumer: str | None = None,
        reason: str | None = None,
        event_type: str | None = None,
        since: str | None = None,
        until: str | None = None,
        all: bool = False,
        new_id: bool = False,
        dry_run: bool = False,
        **options: Any,
    ) -> None:
        selection = DeadLetterSelection(
            consumer=consumer,
            reason=reason,
            event_type=event_type,
            since=moment(since) if since else None,
            until=moment(until) if until else None,
        )
        if selection.unfiltered and not all:
            raise CommandError(
                "name what to redrive (--consumer, --reason, --event-type, --since, --until), or --all for every "
                "waiting dead letter"
            )
        if not selection.unfiltered and all:
            raise CommandError("--all replays every waiting dead letter: give it no filter")
        if selection.since and selection.until and selection.since >= selection.until:
            raise CommandError(f"--since {since} is not before --until {until}: nothing could match")

        def said(outcome: ReplayOutcome) -> None:  # the refused ones, one line each (replayed ones: counted)
            if not outcome.replayed:
                self.stdout.write(replay_line(outcome))

        report = dead_letter_redrive(selection, new_id=new_id, dry_run=dry_run, on_outcome=said)
        if not report.matched:
            self.stdout.write("no waiting dead letters match")
            return
        verb = "would replay" if dry_run else "replayed"
        self.stdout.write(f"{report.matched} waiting dead letter(s) match (consumer, reason, event type):")
        for group in report.groups:
            self.stdout.write(f"  {group.count}\t{group.consumer}\t{group.reason}\t{group.event_type or '-'}")
        refused = sum(report.refused.values())
        by_code = ", ".join(f"{code} {count}" for code, count in sorted(report.refused.items()))
        self.stdout.write(
            f"{verb} {report.replayed}, {'would refuse' if dry_run else 'refused'} {refused}"
            + (f" ({by_code})" if by_code else "")
            + (": dry run, nothing changed" if dry_run else "")
        )
        if refused and not dry_run:
            raise SystemExit(1)

    def _purge(self, ids: tuple[int, ...], **options: Any) -> None:
        self.stdout.write(f"{dead_letter_purge(ids=list(ids))} dead letter(s) purged")


def _one_line(text: str) -> str:
    return " ".join(text.split())
