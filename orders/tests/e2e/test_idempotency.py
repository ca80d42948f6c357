"""Checkout keys: a duplicate while the first is in flight, a process that dies mid-checkout, expiry.

The key's row is written in the order's own transaction, so these need real concurrency: a
second connection (a thread, or a process killed with SIGKILL) holds the first request open.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, connections, transaction
from django.test import Client
from django.utils import timezone

from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import BASE_DIR, database_url, wait_until
from orders.conf import setting
from orders.models import CheckoutRequest, Order, StorefrontProduct
from orders.services import checkout as service
from orders.services.checkout import Line, checkout, checkout_keys_purge, request_fingerprint

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

BODY = {"customer_id": "c", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": "tok_visa"}


@pytest.fixture(autouse=True)
def storefront():
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("3.00"), available=9, version=1)


def post(key="k", body=BODY):
    return Client().post(
        "/api/checkout/", json.dumps(body), content_type="application/json", headers={"Idempotency-Key": key}
    )


class FirstRequest(threading.Thread):
    """A checkout with key ``k`` that stays inside its transaction until told how to end."""

    def __init__(self):
        super().__init__(daemon=True)
        self.inside, self.finish = threading.Event(), threading.Event()
        self.commit = True
        self.backend_pid = None
        self.result = None

    def run(self):
        try:
            with transaction.atomic():
                self.result = checkout(
                    key="k", request_hash=request_fingerprint(BODY), customer_id="c",
                    lines=[Line("WIDGET", 1)], payment_token="tok_visa",
                )  # fmt: skip
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    [self.backend_pid] = cursor.fetchone()
                self.inside.set()
                self.finish.wait(30)
                transaction.set_rollback(not self.commit)
        finally:
            connections.close_all()

    def end(self, *, commit: bool):
        self.commit = commit
        self.finish.set()
        self.join(30)


def test_a_duplicate_while_the_first_is_in_flight_waits_then_gets_409(settings):
    settings.IDEMPOTENCY_KEY_WAIT = 0.5
    first = FirstRequest()
    first.start()
    assert first.inside.wait(30)

    started = time.monotonic()
    response = post()
    waited = time.monotonic() - started

    assert (response.status_code, response.json()["code"]) == (409, "idempotency_key_in_use")
    assert 0.5 <= waited < 3
    first.end(commit=False)
    assert (Order.objects.count(), CheckoutRequest.objects.count()) == (0, 0)
    assert post().status_code == 201  # the first rolled back: the key is free


def waiting_on_the_transaction_of(backend_pid: int) -> int:
    """Backends waiting for a lock on the transaction of ``backend_pid`` (the key's uncommitted row)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks waiting JOIN pg_locks holding "
            "ON holding.locktype = 'transactionid' AND holding.transactionid = waiting.transactionid "
            "WHERE NOT waiting.granted AND holding.granted AND holding.pid = %s",
            [backend_pid],
        )
        return cursor.fetchone()[0]


def test_a_duplicate_that_the_first_finishes_before_replays_the_first_answer(settings):
    settings.IDEMPOTENCY_KEY_WAIT = 10  # longer than the test needs to see the duplicate wait
    first = FirstRequest()
    first.start()
    assert first.inside.wait(30)
    replies = []
    duplicate = threading.Thread(target=lambda: (replies.append(post()), connections.close_all()))
    duplicate.start()
    wait_until(
        lambda: waiting_on_the_transaction_of(first.backend_pid) == 1,
        timeout=5,
        interval=0.02,
        message="the duplicate to wait on the first's uncommitted key",
    )

    first.end(commit=True)
    duplicate.join(30)

    [reply] = replies
    assert reply.status_code == 201 and reply.headers["Idempotent-Replayed"] == "true"
    assert reply.json() == first.result.body
    assert Order.objects.count() == 1 and CheckoutRequest.objects.get().order_id == Order.objects.get().id


def test_a_process_killed_mid_checkout_leaves_its_key_free(tmp_path):
    # A real process places the order, then waits inside its transaction until SIGKILLed.
    marker = tmp_path / "inside"
    script = (
        "import django, os, time\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); django.setup()\n"
        "from django.db import transaction\n"
        "from orders.services.checkout import Line, checkout\n"
        "with transaction.atomic():\n"
        f"    checkout(key='k', request_hash='{request_fingerprint(BODY)}', customer_id='c',\n"
        "             lines=[Line('WIDGET', 1)], payment_token='tok_visa')\n"
        f"    open('{marker}', 'w').close()\n"
        "    time.sleep(60)\n"
    )
    env = {**os.environ, "DATABASE_URL": database_url(), "DEBUG": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=BASE_DIR, env=env, start_new_session=True)
    try:
        wait_until(marker.exists, timeout=30, message="the process inside its checkout")
        assert post().status_code == 409  # in flight
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    response = post()

    assert response.status_code == 201 and "Idempotent-Replayed" not in response.headers
    assert Order.objects.count() == 1


def test_a_failure_inside_checkout_keeps_nothing(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("representation broke")

    monkeypatch.setattr(service, "order_representation", broken)
    failed = post()
    monkeypatch.undo()

    assert (failed.status_code, failed.json()["code"]) == (500, "server_error")

    assert (Order.objects.count(), CheckoutRequest.objects.count()) == (0, 0)
    assert post().status_code == 201


def test_expired_keys_are_forgotten_and_purged():
    ttl = setting("IDEMPOTENCY_KEY_TTL")  # orders' own default (orders/conf.py)
    assert post().status_code == 201
    CheckoutRequest.objects.update(created_at=timezone.now() - timedelta(seconds=ttl + 1))

    other_body = {**BODY, "customer_id": "someone else"}
    assert post(body=other_body).status_code == 201  # expired, not yet purged: free again, not a 422
    assert Order.objects.count() == 2
    CheckoutRequest.objects.update(created_at=timezone.now() - timedelta(seconds=ttl + 1))
    assert checkout_keys_purge() == 1
    assert CheckoutRequest.objects.count() == 0


def test_one_checkout_is_one_commit(django_assert_num_queries):
    # The order, its lines, its outbox row and the key: one transaction, no savepoint, every lock wait
    # bounded from its start; a new customer's data key made with the order's event; the order and its
    # lines in one statement; the key last.
    with django_assert_num_queries(9) as captured:
        assert post().status_code == 201
    statements = [" ".join(q["sql"].split()[:3]).upper() for q in captured.captured_queries]
    assert statements == [
        "BEGIN",
        "SET LOCAL LOCK_TIMEOUT",
        'SELECT "ORDERS_STOREFRONT_PRODUCT"."SKU" AS',
        "SELECT KEY_ID, WRAP_KID,",  # the customer's key: none yet
        "INSERT INTO MESSAGING_SUBJECT_KEY",  # ... RETURNING: no read after it
        "WITH W0 AS",
        "INSERT INTO MESSAGING_OUTBOX",
        "WITH W0 AS",
        "COMMIT",
    ]
    inserted = [re.findall(r'INSERT INTO "?(\w+)', q["sql"]) for q in captured.captured_queries]
    assert inserted == [
        [], [], [], [], ["messaging_subject_key"], ["orders_order", "orders_order_line"], ["messaging_outbox"],
        ["orders_checkout_request"], [],
    ]  # fmt: skip
