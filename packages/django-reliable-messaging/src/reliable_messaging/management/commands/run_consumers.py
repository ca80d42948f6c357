from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from reliable_messaging._consumer import ConsumerWorker
from reliable_messaging._declarations import hosted_names
from reliable_messaging._lifecycle import Stopper, refuse_unmigrated_database, use_dedicated_connections
from reliable_messaging._logs import log_to_stderr_unless_configured
from reliable_messaging._registry import local_consumers
from reliable_messaging._serve_metrics import serve_metrics
from reliable_messaging._topology import EVENT_LOG_CONSUMER
from reliable_messaging._topology import consumers as system_consumers


class Command(BaseCommand):
    help = (
        "Consume messages for the named consumers (default: every consumer this deployment hosts, "
        "but those named with --except). SIGTERM finishes the message in hand."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "consumers", nargs="*", metavar="CONSUMER", help=f"hosted here: {', '.join(local_consumers())}"
        )
        parser.add_argument(
            "--except",
            dest="excluded",
            default="",
            metavar="C1,C2",
            help="every hosted consumer but these (which another process runs)",
        )
        parser.add_argument("--once", action="store_true", help="handle what is queued, then exit")
        parser.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")

    def handle(
        self,
        *args: Any,
        consumers: Sequence[str] = (),
        excluded: str = "",
        once: bool = False,
        metrics_port: int | None = None,
        **options: Any,
    ) -> None:
        log_to_stderr_unless_configured(options["verbosity"])
        hosted = local_consumers()
        known = system_consumers()
        excepted = [name for name in excluded.split(",") if name]
        if consumers and excepted:
            raise CommandError("name the consumers or exclude some with --except, not both")
        if unknown := sorted(set(consumers) - set(known)) or sorted(set(excepted) - set(known)):
            raise CommandError(f"unknown consumer(s): {', '.join(unknown)}; the system has: {', '.join(known)}")
        if elsewhere := sorted(set(consumers) - set(hosted)):
            raise CommandError(
                f"not hosted by this deployment (CONTEXTS={','.join(hosted_names())}): {', '.join(elsewhere)}; "
                f"it hosts: {', '.join(hosted) or 'no consumer'}"
            )
        chosen = list(consumers) or [c for c in hosted if c not in excepted]
        if not chosen:
            raise CommandError(
                f"this deployment (CONTEXTS={','.join(hosted_names())}) hosts no consumer"
                + (f" besides {', '.join(excepted)}" if excepted else "")
            )
        use_dedicated_connections()
        # The Procfile's two consumer processes take their ports from two variables: the one
        # that names the event log's consumer, and the one that takes the others.
        variable = "ORDERS_CONSUMERS_METRICS_PORT" if EVENT_LOG_CONSUMER in consumers else "CONSUMERS_METRICS_PORT"
        serve_metrics(metrics_port, variable=variable)
        refuse_unmigrated_database()
        worker = ConsumerWorker(chosen, stopper=Stopper().install())
        code = worker.run(once=once)
        if code:
            raise SystemExit(code)
