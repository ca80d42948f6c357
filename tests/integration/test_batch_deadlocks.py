"""A batch that loses PostgreSQL deadlocks, forced step by step rather than left to timing.

Two inventory orders decided in one batch: ``x`` wants HOT-A, ``y`` wants HOT-B. The first
attempt takes them in bulk (``inventory.handlers.on_payments_succeeded``): both orders'
reservation rows, then the products by SKU; the second runs each member's own handler in a
savepoint, ``x`` first (a batch goes in correlation-id order). A rival transaction, standing for
another consumer's batch, holds HOT-B and asks for what the batch holds: when the batch then
asks for HOT-B, the circle closes.

PostgreSQL looks for a deadlock once per lock wait, ``deadlock_timeout`` (1 s) after the wait
began, and fails the statement of the backend that finds one. Two things make that backend the
batch's, every time: the rival never looks (its ``deadlock_timeout`` is an hour), and the
batch's wait for HOT-B begins only after the rival's wait. For the second, a third session,
the gate, holds ``y``'s reservation row, which the batch locks just before HOT-B, and lets go
once the rival waits. Each step waits for the lock wait it needs (``pg_blocking_pids``), never
for a clock.
"""

import json
import logging
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from decimal import Decimal

import psycopg
import pytest
from django.db import connection, connections
from reliable_messaging._dispatch import Delivery, Outcome, decide_batch
from reliable_messaging.models import InboxMessage, OutboxMessage

from faultlib.processes import database_url, wait_until
from inventory.models import Product, Reservation

pytestmark = pytest.mark.django_db(transaction=True)

EVENT = "payments.payment.succeeded"
WAIT = 30  # seconds: the bound of every step, far beyond the 1 s a deadlock takes to be found
LOCK_PRODUCT = "SELECT 1 FROM inventory_product WHERE sku = %s FOR UPDATE"
LOCK_RESERVATION = "SELECT 1 FROM inventory_reservation WHERE order_id = %s FOR UPDATE"


class Session:
    """A connection of its own, one transaction until it rolls back. Its statements run in turn
    on a thread of its own, so one waiting for a lock (``start``) leaves the test free."""

    def __init__(self, name: str) -> None:
        self.connection = psycopg.connect(database_url(), application_name=name)
        self.pid = self.connection.info.backend_pid
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=name)

    def start(self, sql: str, *params) -> Future:
        return self._thread.submit(self.connection.execute, sql, params or None)

    def run(self, sql: str, *params) -> None:
        self.start(sql, *params).result(timeout=WAIT)

    def rollback(self) -> None:
        self._thread.submit(self.connection.rollback).result(timeout=WAIT)

    def close(self) -> None:
        self.connection.cancel_safe()  # a statement still waiting (the test failed) gives up
        self._thread.shutdown(cancel_futures=True)
        self.connection.close()


class BatchInThread:
    """``decide_batch`` on a thread, and so a connection, of its own; ``pid``: its backend."""

    def __init__(self, deliveries: list[Delivery]) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="batch")
        self.pid = self._thread.submit(self._backend_pid).result(timeout=WAIT)
        self.decisions = self._thread.submit(self._decide, deliveries)
        self._thread.shutdown(wait=False)  # nothing more to run; it ends with the batch

    @staticmethod
    def _backend_pid() -> int:
        with connection.cursor() as cursor:
            # The batch is the one that checks, and so the loser: soon, whatever the server's setting.
            cursor.execute("SET deadlock_timeout = '100ms'")
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    @staticmethod
    def _decide(deliveries: list[Delivery]):
        try:
            return decide_batch(deliveries)
        finally:
            connections.close_all()


@pytest.fixture
def rival():
    session = Session("rival")
    yield session
    session.close()


@pytest.fixture
def gate():
    session = Session("gate")
    yield session
    session.close()


def waits_for(waiting: int, holder: int, what: str) -> None:
    """Wait until ``waiting`` waits for a lock that ``holder`` holds, and nobody else does."""

    def blocked() -> set[int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [holder])
            return {pid for (pid,) in cursor.fetchall()}

    wait_until(lambda: blocked() == {waiting}, timeout=WAIT, interval=0.02, message=what)


def delivery(order_id: str, sku: str) -> Delivery:
    """A payments.payment.succeeded v1 message for one unit of ``sku``."""
    payload = {
        "order_id": order_id,
        "amount": "1.00",
        "currency": "USD",
        "charge_id": f"ch_{order_id}",
        "items": [{"sku": sku, "quantity": 1}],
    }
    return Delivery(
        consumer="inventory",
        body=json.dumps(payload).encode(),
        properties={"message_id": f"msg-{order_id}", "correlation_id": order_id},
        headers={"event_type": EVENT, "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"},
        routing_key=EVENT,
    )


def test_a_batch_that_loses_deadlocks_decides_each_loser_again_and_every_member_once(rival, gate, caplog):
    caplog.set_level(logging.INFO, logger="reliable_messaging.dispatch")
    Product.objects.bulk_create(
        [Product(sku="HOT-A", name="A", price=Decimal("1.00"), stock=10),
         Product(sku="HOT-B", name="B", price=Decimal("1.00"), stock=10)]
    )  # fmt: skip
    x, y = sorted(str(uuid.uuid4()) for _ in range(2))
    for order_id in (x, y):  # as the handlers would create them, for the rival and the gate to lock
        Reservation.objects.create(order_id=order_id)
    rival.run("SET deadlock_timeout = '1h'")
    rival.run(LOCK_PRODUCT, "HOT-B")
    rival.run("SAVEPOINT wants_more")
    gate.run(LOCK_RESERVATION, y)

    # 1. The first attempt, in bulk, no savepoints: x's reservation taken, y's waits at the gate.
    batch = BatchInThread([delivery(x, "HOT-A"), delivery(y, "HOT-B")])
    waits_for(batch.pid, gate.pid, "the bulk handler to wait at the gate, holding x's reservation")
    wants_x = rival.start(LOCK_RESERVATION, x)
    waits_for(rival.pid, batch.pid, "the rival to wait for x's reservation")
    gate.rollback()  # the batch takes HOT-A, asks for HOT-B: the circle closes, and the batch finds it
    wants_x.result(timeout=WAIT)  # granted: the whole first attempt rolled back

    # 2. The second attempt, a savepoint per member: x waits for its reservation, then y at the gate.
    gate.run(LOCK_RESERVATION, y)
    waits_for(batch.pid, rival.pid, "x, in its savepoint, to wait for its reservation")
    rival.run("ROLLBACK TO SAVEPOINT wants_more")  # x's reservation given back, HOT-B kept
    waits_for(batch.pid, gate.pid, "y, in its savepoint, to wait at the gate, x holding HOT-A")
    wants_a = rival.start(LOCK_PRODUCT, "HOT-A")
    waits_for(rival.pid, batch.pid, "the rival to wait for HOT-A")
    gate.rollback()  # the circle closes again: y's savepoint rolls back, x stays in the batch
    wants_a.result(timeout=WAIT)  # granted: the batch committed x

    # 3. The rival ends, and y, decided alone after the commit, takes HOT-B.
    rival.rollback()
    decisions = batch.decisions.result(timeout=WAIT)

    assert [d.outcome for d in decisions] == [Outcome.HANDLED, Outcome.HANDLED]
    assert sorted(Product.objects.values_list("sku", "stock")) == [("HOT-A", 9), ("HOT-B", 9)]
    assert sorted(Reservation.objects.values_list("order_id", "status")) == [
        (uuid.UUID(x), Reservation.Status.RESERVED),
        (uuid.UUID(y), Reservation.Status.RESERVED),
    ]
    inbox = InboxMessage.objects.filter(consumer="inventory").values_list("message_id", flat=True)
    assert sorted(inbox) == [f"msg-{x}", f"msg-{y}"]
    reserved = OutboxMessage.objects.filter(event_type="inventory.stock.reserved")
    assert sorted(reserved.values_list("aggregate_id", flat=True)) == [x, y]
    # Each deadlock was lost where it was forced: the first attempt (all of it again, in
    # savepoints), then y's savepoint (y alone, after the batch's commit).
    said = [(r.getMessage().splitlines()[0], getattr(r, "message_id", None)) for r in caplog.records]
    assert [line for line in said if "deadlock" in line[0]] == [
        ("a member of the batch failed: the batch again, each member in its savepoint: deadlock detected", None),
        ("deadlock inside a batch: decided again alone", f"msg-{y}"),
    ]
