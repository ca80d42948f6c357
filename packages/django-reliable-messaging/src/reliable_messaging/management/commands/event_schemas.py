from collections.abc import Sequence
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reliable_messaging._conf import setting
from reliable_messaging._contracts import schemas
from reliable_messaging._schema_freeze import frozen_problems, write_snapshots


def snapshot_dir() -> Path:
    return Path(setting("SCHEMA_SNAPSHOT_DIR"))


class Command(BaseCommand):
    help = (
        "Compare every event schema with its committed snapshot (docs/schemas-snapshot/): fails on a change "
        "that breaks the version's readers. --snapshot writes the snapshots of new versions and additive changes."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--snapshot", action="store_true", help="write the snapshots (refused if one would break)")
        parser.add_argument(
            "--unreleased",
            metavar="CONTEXT",
            action="append",
            default=[],
            help="with --snapshot: a context never released yet, whose snapshots are rewritten as its schemas "
            "are now (nobody reads its versions yet; they freeze at its first release)",
        )

    def handle(self, *args: Any, snapshot: bool = False, unreleased: Sequence[str] = (), **options: Any) -> None:
        if unreleased and not snapshot:
            raise CommandError("--unreleased rewrites snapshots: it goes with --snapshot")
        known = schemas()
        if unknown := sorted(set(unreleased) - {event_type.split(".", 1)[0] for event_type, _ in known}):
            raise CommandError(f"--unreleased {', '.join(unknown)}: no installed context publishes under that name")
        problems = [
            problem
            for problem in frozen_problems(known, snapshot_dir())
            if not (snapshot and "no snapshot" in problem) and problem.split(".", 1)[0] not in unreleased
        ]
        if problems:
            raise CommandError("\n".join(problems))
        for context in unreleased:  # its versions freeze at its first release: snapshotted afresh
            for path in snapshot_dir().glob(f"{context}.*.json"):
                path.unlink()
        if snapshot:
            for name in write_snapshots(known, snapshot_dir()):
                self.stdout.write(f"wrote {snapshot_dir() / name}")
        self.stdout.write(f"{len(known)} event schemas, none breaks its snapshot")
