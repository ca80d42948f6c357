"""A payment gateway that never answers, among ordinary orders, in real processes on PostgreSQL and
RabbitMQ: the hung charge costs its batch one GATEWAY_TIMEOUT, fails alone, is retried and found
at the gateway by its idempotency key; every other order keeps flowing."""

import statistics
import time
from datetime import datetime
from decimal import Decimal

import pytest
from django.test import Client

from faultlib.saga import checkout, ledger, seed_catalog, stock, wait_terminal
from messaging.models import DeadLetter
from orders.models import Order
from payments.models import GatewayOperation
from tests.conftest import ALL_DATABASES
from tests.support import fault_fixtures

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
process_env, rng = fault_fixtures.process_env, fault_fixtures.rng

GATEWAY_TIMEOUT = 5.0
# The hung charge's retry comes this long after its timeout: the ordinary orders, which wait at
# most one timeout for it, are all confirmed before.
RETRY_DELAY = 6.0
PRICE = Decimal("19.99")


def test_an_order_paid_with_tok_hang_among_50_ordinary_ones(processes, quiet_broker, rng):
    # given the Procfile's processes, with a short gateway timeout and one retry delay
    env = {"GATEWAY_TIMEOUT": str(GATEWAY_TIMEOUT), "CONSUMER_RETRY_DELAYS": str(RETRY_DELAY)}
    processes.start("relay", "run_outbox_relay")
    processes.start("orders-events", "run_consumers", "orders", "events", env=env)
    seed_catalog()
    client = Client()
    quantities = {}

    def place(count: int, pace: float = 0.0) -> None:
        for _ in range(count):
            quantity = rng.randint(1, 3)
            quantities[checkout(client, [{"sku": "WIDGET", "quantity": quantity}])["id"]] = quantity
            time.sleep(rng.uniform(0, pace))

    # when one order paid with a token the gateway never answers waits among 20 ordinary ones
    # for payments (so that they meet in one batch), then payments starts and 30 more follow,
    # placed during and after the hang
    place(10)
    hung = checkout(client, [{"sku": "WIDGET", "quantity": 1}], token="tok_hang")["id"]
    place(10)
    payments = processes.start("payments-inventory", "run_consumers", "payments", "inventory", env=env)
    place(30, pace=0.6)
    wait_terminal([hung, *quantities], timeout=90)

    # then the 50 confirm, with one charge each of the right amount, and the stock is exact
    ordinary = list(Order.objects.filter(pk__in=list(quantities)))
    assert sorted(o.status for o in ordinary) == ["CONFIRMED"] * 50
    assert {str(o.pk): ledger(o.pk) for o in ordinary} == {
        order_id: [("charge", PRICE * quantity)] for order_id, quantity in quantities.items()
    }
    # and the hung one, charged on the gateway's side before it hung, is found by its key on
    # the retry and confirmed: one charge, no refund, no dead letter
    hung_order = Order.objects.get(pk=hung)
    assert (hung_order.status, hung_order.failure_reason) == ("CONFIRMED", None)
    assert ledger(hung) == [("charge", PRICE)]
    assert GatewayOperation.objects.using("gateway").filter(kind="refund").count() == 0
    assert stock("WIDGET") == 1000 - 1 - sum(quantities.values())
    assert DeadLetter.objects.count() == 0
    retries = [
        line for line in processes.log_lines(payments) if line.get("event", "").startswith("handler failed, retry")
    ]
    assert [(r["correlation_id"], r["event"][:34]) for r in retries] == [(hung, "handler failed, retry 1 of 4 in 6.")]
    assert "no answer within GATEWAY_TIMEOUT (5 s)" in retries[0]["event"]

    # and no order waited much longer than one gateway timeout because of the hung one (the
    # hung charge is not tried again within its batch): all 50 were confirmed before the hung
    # one's retry came, each within two timeouts of its checkout or of payments' start
    started = next(
        datetime.fromisoformat(line["timestamp"]).timestamp()
        for line in processes.log_lines(payments)
        if line["event"] == "consuming"
    )

    def waited(order: Order) -> float:
        return order.updated_at.timestamp() - max(order.created_at.timestamp(), started)

    waits = sorted(waited(o) for o in ordinary)
    after_hang = sorted(waited(o) for o in ordinary if o.created_at.timestamp() > started + GATEWAY_TIMEOUT + 1)
    print(
        f"hung order: confirmed {waited(hung_order):.1f} s after payments started "
        f"(GATEWAY_TIMEOUT {GATEWAY_TIMEOUT:g} s + retry delay {RETRY_DELAY:g} s)\n"
        f"50 ordinary: waited median {statistics.median(waits):.2f} s, max {waits[-1]:.2f} s; "
        f"the {len(after_hang)} placed after the hang: median "
        f"{statistics.median(after_hang) if after_hang else float('nan'):.2f} s"
    )
    assert max(o.updated_at for o in ordinary) < hung_order.updated_at
    assert waits[-1] < 2 * GATEWAY_TIMEOUT
