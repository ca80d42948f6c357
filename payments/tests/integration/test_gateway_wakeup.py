"""The gateway worker wakes the moment a call is recorded due (payments/wakeup.py), on PostgreSQL:
a committed charge or refund notifies its listener, a rolled-back one does not, and a listener
whose connection is cut listens again on its own."""

import threading
import time
import uuid
from contextlib import nullcontext
from decimal import Decimal

import pytest
from django.db import connection, transaction

from payments import services
from payments.models import Payment
from payments.wakeup import APPLICATION_NAME, CHANNEL, DueCallListener

ALL_DATABASES = ["default", "gateway"]  # payments keeps the fake gateway's ledger on a database of its own

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


def listening_pids() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s AND query = %s",
            [APPLICATION_NAME, f"LISTEN {CHANNEL}"],
        )
        return [pid for (pid,) in cursor.fetchall()]


def wait_for(condition, seconds: float = 10.0):
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return found


@pytest.fixture
def listener():
    wake, stop = threading.Event(), threading.Event()
    thread = DueCallListener(wake, stop)
    thread.start()
    try:
        wait_for(listening_pids)
        assert wake.wait(5)  # listening: it looks once for what was recorded before
        wake.clear()
        yield wake
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()
    assert wait_for(lambda: not listening_pids())  # its connection closed with it


def charge(order_id: uuid.UUID) -> None:
    request = services.ChargeRequest(order_id, Decimal("12.50"), "USD", "tok_visa", [])
    services.payment_charge([request], turn=lambda n: nullcontext())


def test_a_committed_charge_wakes_the_worker(listener):
    order_id = uuid.uuid4()

    charge(order_id)

    assert listener.wait(5)
    assert Payment.objects.get(order_id=order_id).status == Payment.Status.CHARGING


def test_a_rolled_back_charge_wakes_nobody(listener):
    order_id = uuid.uuid4()

    with pytest.raises(RuntimeError), transaction.atomic():
        charge(order_id)
        raise RuntimeError("the batch failed")

    assert not listener.wait(1.0)
    assert not Payment.objects.filter(order_id=order_id).exists()


def test_a_refund_due_wakes_the_worker(listener):
    order_id = uuid.uuid4()
    Payment.objects.create(order_id=order_id, status=Payment.Status.CHARGED, amount=Decimal("12.50"), charge_id="ch_1")

    services.payment_refund(order_id=order_id, reason="order_cancelled")

    assert listener.wait(5)
    assert Payment.objects.get(order_id=order_id).status == Payment.Status.REFUNDING


def test_a_listener_whose_connection_is_cut_listens_again(listener):
    [first] = listening_pids()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [first])

    [second] = wait_for(lambda: [pid for pid in listening_pids() if pid != first])
    assert listener.wait(5)  # on losing it, and again on listening: look for what was missed
    listener.clear()
    charge(uuid.uuid4())

    assert second != first
    assert listener.wait(5)
