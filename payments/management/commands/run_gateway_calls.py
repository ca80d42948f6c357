import signal
import threading

from django.core.management.base import BaseCommand

from payments.gateway_calls import run


class Command(BaseCommand):
    help = "Make payments' gateway calls outside any transaction, GATEWAY_CONCURRENCY at once (GATEWAY_CALLS=worker)."

    def handle(self, *args, **options):
        stop = threading.Event()
        # Set, not inherited: a child started with these signals ignored must still stop on them.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write("gateway calls: waiting for payments in flight")
        run(stop)
