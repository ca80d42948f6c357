"""A payments message that fails for a while, the honest way: someone else holds its order's
payment row. Payments' handlers no longer call the gateway (the gateway worker does), so a
gateway that fails never fails a message; a row held by a stuck process does."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from faultlib.processes import database_url
from payments.models import Payment


@contextmanager
def payment_row_held(order_id: str, release_after: float | None = None) -> Iterator[None]:
    """Hold ``order_id``'s payment row (``FOR UPDATE``) from another session: a handler of that
    order waits ``WORKER_LOCK_TIMEOUT`` and then fails for later (a retry), on every attempt while
    it is held. ``release_after``: let go after that many seconds (a handler that is merely slow)."""
    Payment.objects.bulk_create([Payment(order_id=order_id)], ignore_conflicts=True)
    with psycopg.connect(database_url()) as holder:
        holder.execute("SELECT 1 FROM payments_payment WHERE order_id = %s FOR UPDATE", [order_id])
        timer = threading.Timer(release_after, holder.rollback) if release_after is not None else None
        if timer is not None:
            timer.start()
        try:
            yield
        finally:
            if timer is not None:
                timer.cancel()
                timer.join()
            holder.rollback()
