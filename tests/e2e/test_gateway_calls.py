"""Payments' gateway calls outside any transaction, made by the gateway worker, in real processes on
PostgreSQL and RabbitMQ, the fake gateway answering at a median of 250 ms: the gateway worker
SIGKILLed after the record in flight, after the call and after the outcome's commit charges every
order exactly once and refunds once (the gateway's own ledger, read over HTTP); hung calls hold up
no other order. The issue's sizes: 100 orders per kill point, 5 hung among 200."""

import json
import urllib.request
from decimal import Decimal

import pytest

from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import check_invariants, wait_quiet
from faultlib.load import CATALOG, INITIAL_STOCK
from faultlib.processes import wait_until
from faultlib.saga import seed_catalog, wait_terminal
from faultlib.scenarios import FAST_RETRIES
from orders.models import Order
from orders.services.checkout import Line, order_place
from orders.services.saga import order_cancel
from payments.models import Payment
from tests.support import fault_fixtures

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
process_env = fault_fixtures.process_env

LATENCY_MS = "250"
PRICES = {sku: price for sku, _, price, _ in CATALOG}


def start_saga(processes, gateway_timeout: float, calls_env: dict[str, str] | None = None) -> dict[str, str]:
    """The gateway at 250 ms, a relay, every consumer, and the gateway worker the test starts
    (before the consumers: the group then starts none of its own); the workers' environment."""
    # The default attempts, not FAST_RETRIES' 3: at 250 ms with a 1.5 s timeout, the tail of the
    # latency (p99 about 1.5 s) can time out two look-ups of one order in a row on a loaded
    # machine, and a charge given up (declined, the order failed) is not what these tests count.
    worker = {"GATEWAY_TIMEOUT": str(gateway_timeout), **FAST_RETRIES, "GATEWAY_CHARGE_ATTEMPTS": "8"}
    processes.start_gateway(env={"FAKE_GATEWAY_LATENCY": LATENCY_MS})
    processes.start("calls", "run_gateway_calls", env={**worker, **(calls_env or {})})
    processes.start("relay", "run_outbox_relay")
    processes.start("consumers", "run_consumers", env=worker)
    seed_catalog(catalog=CATALOG)
    return worker


def http_ledger(processes) -> list[tuple[str, str, Decimal]]:
    """The money the gateway moved, as its service answers it."""
    with urllib.request.urlopen(processes.env["GATEWAY_URL"] + "/v1/ledger", timeout=10) as response:
        data = json.load(response)["data"]
    return sorted((op["metadata"]["order_id"], op["object"], Decimal(op["amount"]) / 100) for op in data)


def expected_ledger(orders: dict[str, Decimal]) -> list[tuple[str, str, Decimal]]:
    """One charge per order that got one; a refund of it for a cancelled or failed order."""
    rows = []
    for order in Order.objects.filter(pk__in=list(orders)):
        amount = orders[str(order.pk)]
        if order.status == Order.Status.CONFIRMED:
            rows.append((str(order.pk), "charge", amount))
        elif order.status == Order.Status.CANCELLED or order.failure_reason == "out_of_stock":
            rows += [(str(order.pk), "charge", amount), (str(order.pk), "refund", amount)]
    return sorted(rows)


@pytest.mark.parametrize("point", ["before_call", "after_call", "after_outcome"])
def test_the_gateway_worker_killed_at_each_step_charges_once_and_refunds_once(processes, quiet_broker, tmp_path, point):
    # given the saga and a gateway worker that stops at the point, among 100 orders (2 of them
    # for more RARE prints than exist: refunded for stock) at 250 ms
    marker = tmp_path / "calls.pid"
    fault = {"FAULT_POINT": f"gateway_calls.{point}", "FAULT_MARKER": str(marker)}
    worker = start_saga(processes, gateway_timeout=1.5, calls_env=fault)
    doomed = processes.gateway_calls
    lines = [Line("WIDGET", 1 + n % 3) for n in range(98)] + [Line("RARE", 4), Line("RARE", 4)]
    orders = {}
    for n, line in enumerate(lines):
        order = order_place(customer_id=f"c{n}", lines=[line], payment_token="tok_visa")
        orders[str(order.id)] = PRICES[line.sku] * line.quantity

    # when it is SIGKILLed there and a new one takes over; then 3 confirmed orders are cancelled
    wait_until(marker.exists, timeout=60, message=f"the gateway worker to stop at {point}")
    processes.kill(doomed)
    calls = processes.start("calls", "run_gateway_calls", env=worker)
    wait_terminal(list(orders), timeout=120)
    confirmed = list(Order.objects.filter(pk__in=list(orders), status=Order.Status.CONFIRMED)[:3])
    for order in confirmed:
        order_cancel(order_id=order.id)
    wait_quiet(timeout=120)
    # The queues can be quiet while a call is still in the air (a refund answered, its outcome not
    # yet recorded, or a row waiting for the killed worker's lease to expire): wait for the worker.
    wait_until(
        lambda: not Payment.objects.filter(status__in=[Payment.Status.CHARGING, Payment.Status.REFUNDING]).exists(),
        timeout=60,
        message="every gateway call recorded",
    )
    wait_quiet(timeout=60)

    # then every order was charged once, the failed and cancelled ones refunded once, nothing else
    statuses = sorted(Order.objects.filter(pk__in=list(orders)).values_list("status", flat=True))
    assert statuses == ["CANCELLED"] * 3 + ["CONFIRMED"] * 96 + ["FAILED"]
    assert http_ledger(processes) == expected_ledger(orders)
    assert processes.stop(calls) == 0
    report = check_invariants(initial_stock=INITIAL_STOCK, cancelled=[o.id for o in confirmed])
    assert report.violations == [], str(report)


def test_five_hung_calls_among_200_hold_up_no_other_order(processes, quiet_broker):
    # given the saga with the gateway at 250 ms and a 10 s gateway timeout (the default)
    gateway_timeout = 10.0
    start_saga(processes, gateway_timeout=gateway_timeout)

    # when 5 orders paid with a token the gateway never answers come among 195 ordinary ones
    hung, ordinary = [], []
    for n in range(200):
        token = "tok_hang" if n % 40 == 0 else "tok_visa"
        order = order_place(customer_id=f"c{n}", lines=[Line("WIDGET", 1)], payment_token=token)
        (hung if token == "tok_hang" else ordinary).append(order.id)
    wait_terminal(ordinary, timeout=120)
    wait_terminal(hung, timeout=120)

    # then no ordinary order waited for a hung call: each finished within less than one gateway
    # timeout of its checkout, every one confirmed; the hung ones confirmed on a later call
    # (found by their key), each charged once
    ordinary_orders = Order.objects.filter(pk__in=ordinary)
    waits = sorted((o.updated_at - o.created_at).total_seconds() for o in ordinary_orders)
    assert len(waits) == 195 and waits[-1] < gateway_timeout, waits[-5:]
    assert set(ordinary_orders.values_list("status", flat=True)) == {"CONFIRMED"}
    assert sorted(Order.objects.filter(pk__in=hung).values_list("status", flat=True)) == ["CONFIRMED"] * 5
    hung_waits = [(o.updated_at - o.created_at).total_seconds() for o in Order.objects.filter(pk__in=hung)]
    assert min(hung_waits) >= gateway_timeout  # they did hang, and the others did not wait for them
    ledger = http_ledger(processes)
    assert [(kind, amount) for order_id, kind, amount in ledger if order_id in {str(h) for h in hung}] == [
        ("charge", PRICES["WIDGET"])
    ] * 5
    assert len(ledger) == 200
    worker = [line["event"] for line in processes.log_lines(processes.gateway_calls) if "event" in line]
    timed_out = "failed, again in 0.5s: no answer within GATEWAY_TIMEOUT (10 s)"
    retried = {f"gateway call for order {h} {timed_out}" for h in hung}
    assert retried <= set(worker), [w for w in worker if "failed" in w]
