"""Hundreds of concurrent checkouts through gunicorn, two relays and two consumer processes.

Every order ends terminal, stock is conserved, money moves exactly as the outcomes say, and
every event is published exactly once.
"""

import json
import sys
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import pytest
from reliable_messaging.models import InboxMessage, OutboxMessage

from fake_gateway.in_process import gateway
from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import check_invariants, wait_quiet
from faultlib.processes import free_port, wait_until
from faultlib.saga import seed_catalog
from inventory.models import Product
from orders.models import Order

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

ORDERS = 240
CATALOG = [("WIDGET", "Widget", Decimal("2.50"), 10_000), ("RARE", "Rare print", Decimal("100.00"), 7)]


def order_request(n: int) -> dict:
    """A mix: mostly confirmable, some declined, a scarce SKU that runs out."""
    token = "tok_chargeDeclined" if n % 10 == 0 else "tok_visa"
    items = [{"sku": "WIDGET", "quantity": 1 + n % 3}]
    if n % 4 == 1:
        items.append({"sku": "RARE", "quantity": 1})
    return {"customer_id": f"load-{n % 17}", "items": items, "payment_token": token}


def post_checkout(base: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{base}/api/checkout/",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": str(uuid.uuid4())},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201
        return json.load(response)


def test_hundreds_of_concurrent_checkouts_reach_consistent_terminal_states(processes, quiet_broker, capture):
    everything = capture("#")
    port = free_port()
    processes.spawn(
        "web",
        [sys.executable, "-m", "gunicorn", "config.wsgi", "-w", "2", "-b", f"127.0.0.1:{port}", "--timeout", "60"],
    )
    for _ in range(2):
        processes.start("relay", "run_outbox_relay")
        processes.start("consumers", "run_consumers")
    seed_catalog(catalog=CATALOG)
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: _up(base), timeout=30, message="gunicorn")

    with ThreadPoolExecutor(max_workers=12) as pool:
        orders = list(pool.map(lambda n: post_checkout(base, order_request(n)), range(ORDERS)))
    ids = [o["id"] for o in orders]
    wait_until(
        lambda: not Order.objects.filter(status="PENDING").exists(), timeout=180, interval=0.5, message="terminal"
    )
    # Compensation (refunds) follows the outcome: wait until nothing is left to do anywhere.
    wait_quiet(timeout=120)
    report = check_invariants(initial_stock={sku: stock for sku, _, _, stock in CATALOG}, broker=False)
    assert report.violations == [], str(report)

    assert Order.objects.count() == ORDERS == len(set(ids))
    statuses = Counter((o.status, o.failure_reason) for o in Order.objects.all())
    declined = sum(1 for n in range(ORDERS) if n % 10 == 0)
    assert statuses[("FAILED", "payment_declined")] == declined
    assert statuses[("CONFIRMED", None)] + statuses[("FAILED", "out_of_stock")] == ORDERS - declined
    # The scarce SKU: exactly its stock was sold, the rest failed for stock.
    rare_confirmed = sum(
        line.quantity for o in Order.objects.filter(status="CONFIRMED") for line in o.lines.all() if line.sku == "RARE"
    )
    assert rare_confirmed == 7
    assert statuses[("FAILED", "out_of_stock")] >= 1

    for sku, _, _, initial in CATALOG:
        held = sum(
            line.quantity for o in Order.objects.filter(status="CONFIRMED") for line in o.lines.all() if line.sku == sku
        )
        assert Product.objects.get(sku=sku).stock + held == initial, sku

    money: dict[str, list[tuple[str, Decimal]]] = {}
    for op in gateway.ledger():
        money.setdefault(op.order_id, []).append((op.kind, op.amount))
    for order in Order.objects.all():
        moved = money.get(str(order.id), [])
        if order.status == "CONFIRMED":
            assert moved == [("charge", order.total)], order.id
        elif order.failure_reason == "payment_declined":
            assert moved == [], order.id
        else:
            assert moved == [("charge", order.total), ("refund", order.total)], order.id

    published = OutboxMessage.objects.count()
    assert OutboxMessage.objects.filter(published_at__isnull=True).count() == 0
    received = Counter(message_id for message_id, _, _ in everything.drain())
    assert len(received) == published and set(received.values()) == {1}
    assert InboxMessage.objects.filter(consumer="events").count() == published


def _up(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/api/products/", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False
