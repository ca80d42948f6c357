import signal
import threading

from django.core.management.base import BaseCommand
from reliable_messaging.api import refuse_unmigrated_database, use_dedicated_connections

from payments.gateway_calls import run, run_due_calls


class Command(BaseCommand):
    help = "Make payments' gateway calls outside any transaction, GATEWAY_CONCURRENCY at once."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="make the calls due now, one at a time, and exit")

    def handle(self, *args, **options):
        use_dedicated_connections()  # one connection, with the workers' session limits
        refuse_unmigrated_database()
        if options["once"]:
            self.stdout.write(f"gateway calls: {run_due_calls()} made")
            return
        stop = threading.Event()
        # Set, not inherited: a child started with these signals ignored must still stop on them.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write("gateway calls: waiting for payments in flight")
        run(stop)
