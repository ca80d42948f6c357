from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from reliable_messaging.conf import setting
from reliable_messaging.contracts import schemas
from reliable_messaging.schema_freeze import frozen_problems, write_snapshots


def snapshot_dir() -> Path:
    return Path(setting("SCHEMA_SNAPSHOT_DIR"))


class Command(BaseCommand):
    help = (
        "Compare every event schema with its committed snapshot (docs/schemas-snapshot/): fails on a change "
        "that breaks the version's readers. --snapshot writes the snapshots of new versions and additive changes."
    )

    def add_arguments(self, parser):
        parser.add_argument("--snapshot", action="store_true", help="write the snapshots (refused if one would break)")

    def handle(self, *args, snapshot=False, **options):
        known = schemas()
        problems = [p for p in frozen_problems(known, snapshot_dir()) if not (snapshot and "no snapshot" in p)]
        if problems:
            raise CommandError("\n".join(problems))
        if snapshot:
            for name in write_snapshots(known, snapshot_dir()):
                self.stdout.write(f"wrote {snapshot_dir() / name}")
        self.stdout.write(f"{len(known)} event schemas, none breaks its snapshot")
