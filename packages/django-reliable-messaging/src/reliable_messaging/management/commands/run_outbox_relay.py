from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from reliable_messaging._conf import setting
from reliable_messaging._lifecycle import Stopper, refuse_unmigrated_database, use_dedicated_connections
from reliable_messaging._logs import log_to_stderr_unless_configured
from reliable_messaging._relay import run_pipelines
from reliable_messaging._serve_metrics import serve_metrics


class Command(BaseCommand):
    help = "Publish the outbox to the broker. Any number may run at once; SIGTERM finishes the batch."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch-size", type=int, default=None, help="rows per transaction")
        parser.add_argument(
            "--pipelines", type=int, default=None, help="claim-publish-confirm loops in this process (RELAY_PIPELINES)"
        )
        parser.add_argument("--once", action="store_true", help="drain what is pending, then exit")
        parser.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")

    def handle(
        self,
        *args: Any,
        batch_size: int | None = None,
        pipelines: int | None = None,
        once: bool = False,
        metrics_port: int | None = None,
        **options: Any,
    ) -> None:
        log_to_stderr_unless_configured(options["verbosity"])
        use_dedicated_connections()
        serve_metrics(metrics_port, variable="RELAY_METRICS_PORT")
        refuse_unmigrated_database()
        count = max(1, pipelines or setting("RELAY_PIPELINES"))
        code = run_pipelines(count, batch_size=batch_size, stopper=Stopper().install(), once=once)
        if code:
            raise SystemExit(code)
