from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kernel.topology import CONSUMERS
from messaging.consumer import ConsumerWorker
from messaging.lifecycle import Stopper, use_dedicated_connections
from messaging.registry import local_consumers
from messaging.serve_metrics import serve_metrics


class Command(BaseCommand):
    help = (
        "Consume messages for the named consumers (default: every consumer this deployment hosts). "
        "SIGTERM finishes the message in hand."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "consumers", nargs="*", metavar="CONSUMER", help=f"hosted here: {', '.join(local_consumers())}"
        )
        parser.add_argument("--once", action="store_true", help="handle what is queued, then exit")
        parser.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")

    def handle(self, *args, consumers=(), once=False, metrics_port=None, **options):
        hosted = local_consumers()
        if unknown := sorted(set(consumers) - set(CONSUMERS)):
            raise CommandError(f"unknown consumer(s): {', '.join(unknown)}; the system has: {', '.join(CONSUMERS)}")
        if elsewhere := sorted(set(consumers) - set(hosted)):
            raise CommandError(
                f"not hosted by this deployment (CONTEXTS={','.join(settings.CONTEXTS)}): {', '.join(elsewhere)}; "
                f"it hosts: {', '.join(hosted) or 'no consumer'}"
            )
        if not hosted:
            raise CommandError(f"this deployment (CONTEXTS={','.join(settings.CONTEXTS)}) hosts no consumer")
        use_dedicated_connections()
        # The Procfile's two consumer processes take their ports from two variables.
        orders_side = {"orders", "events"} & set(consumers)
        variable = "ORDERS_CONSUMERS_METRICS_PORT" if orders_side else "CONSUMERS_METRICS_PORT"
        serve_metrics(metrics_port, variable=variable)
        worker = ConsumerWorker(list(consumers) or hosted, stopper=Stopper().install())
        code = worker.run(once=once)
        if code:
            raise SystemExit(code)
