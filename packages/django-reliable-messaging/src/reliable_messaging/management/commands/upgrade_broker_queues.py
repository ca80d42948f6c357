from typing import Any

from django.core.management.base import BaseCommand, CommandError

from reliable_messaging._conf import setting
from reliable_messaging._queue_upgrade import upgrade_broker_queues


class Command(BaseCommand):
    help = (
        "After a rolling upgrade from a release with classic dead-letter and delay queues (<queue>_dlq, "
        "<queue>_retry_<ms>ms): move what they hold into the quorum queues that replace them and delete them. "
        "Run it once no process of the previous release is left; safe to run again."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if setting("BROKER_URL").startswith("filesystem"):
            raise CommandError("the embedded filesystem broker has no queues to upgrade")
        report = upgrade_broker_queues(setting("BROKER_URL"))
        for old in report.deleted:
            self.stdout.write(f"{old}: {report.moved[old]} message(s) moved, queue deleted")
        if not report.deleted and report.complete:
            self.stdout.write("nothing to upgrade: no queue of the previous release is left")
        if not report.complete:
            busy = ", ".join(f"{q} ({n} consumer(s))" for q, n in report.still_consumed.items())
            raise CommandError(f"still consumed by the previous release, left alone: {busy}; stop it and run again")
