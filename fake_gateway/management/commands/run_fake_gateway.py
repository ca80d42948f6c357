import signal
import threading

from django.core.management.base import BaseCommand
from django.db import connections

from fake_gateway.conf import DATABASE, setting
from fake_gateway.ledger import ensure_storage
from fake_gateway.server import serve


class Command(BaseCommand):
    help = "Run the fake card gateway's HTTP service (fake_gateway/server.py) until SIGTERM or Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=None, help="default: GATEWAY_PORT")

    def handle(self, *args, host="127.0.0.1", port=None, **options):
        stop = threading.Event()
        # Set, not inherited: a child started with these signals ignored must still stop on them.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        ensure_storage()
        connections[DATABASE].close()  # the storage threads hold their own (STORAGE_THREADS): no fifth one
        serve(host, port or setting("GATEWAY_PORT"), stop)
