from django.core.management.base import BaseCommand, CommandError

from messaging.consumer import ConsumerWorker
from messaging.lifecycle import Stopper
from messaging.registry import CONSUMERS
from messaging.serve_metrics import serve_metrics


class Command(BaseCommand):
    help = "Consume messages for the named consumers (default: all). SIGTERM finishes the message in hand."

    def add_arguments(self, parser):
        parser.add_argument("consumers", nargs="*", metavar="CONSUMER", help=f"any of: {', '.join(CONSUMERS)}")
        parser.add_argument("--once", action="store_true", help="handle what is queued, then exit")
        parser.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")

    def handle(self, *args, consumers=(), once=False, metrics_port=None, **options):
        unknown = sorted(set(consumers) - set(CONSUMERS))
        if unknown:
            raise CommandError(f"unknown consumer(s): {', '.join(unknown)}; known: {', '.join(CONSUMERS)}")
        serve_metrics(metrics_port)
        worker = ConsumerWorker(list(consumers) or list(CONSUMERS), stopper=Stopper().install())
        code = worker.run(once=once)
        if code:
            raise SystemExit(code)
