"""Payments' HTTP client of the card gateway against a gateway that lies (faultlib/hostile_gateway.py, a
proxy in front of the fake one that mangles its answers): every answer it cannot believe is an unknown
outcome (asked about by key later) or a refusal, never a success or a decline, never an exception of
another kind; a redirect is never followed; a whole call is bounded by GATEWAY_TIMEOUT; an answer's
size by MAX_ANSWER_BYTES."""

import json
import resource
import time
import urllib.request
from decimal import Decimal

import pytest

from fake_gateway.in_process import gateway as stored
from faultlib.fixtures import ALL_DATABASES
from faultlib.hostile_gateway import MANGLES, HostileGateway
from faultlib.invariants import check_invariants, wait_quiet
from faultlib.load import CATALOG, INITIAL_STOCK
from faultlib.processes import wait_until
from faultlib.saga import seed_catalog, wait_terminal
from faultlib.scenarios import FAST_RETRIES
from orders.models import Order
from orders.services.checkout import Line, order_place
from orders.services.saga import order_cancel
from payments.gateway import GatewayTimeout, GatewayUnavailable, OutcomeUnknown, UnbelievableAnswer
from payments.gateway_client import MAX_RETRY_AFTER, HttpGateway, _retry_after
from payments.models import Payment
from tests.support import fault_fixtures

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
process_env = fault_fixtures.process_env

ORDER = "6f1c2a2e-0000-4000-8000-000000000001"


@pytest.fixture
def hostile(processes):
    processes.start_gateway()
    proxy = HostileGateway(processes.env["GATEWAY_URL"])
    yield proxy
    proxy.close()


def client(url: str, timeout: float = 3.0) -> HttpGateway:
    return HttpGateway(url, timeout=timeout, pool_size=4)


def charge(gateway: HttpGateway, order: str, token: str, amount: str = "12.50"):
    return gateway.charge(
        idempotency_key=f"charge-{order}", order_id=order, amount=Decimal(amount), currency="USD", token=token
    )


def ledger(proxy: HostileGateway) -> list[tuple[str, str, int]]:
    with urllib.request.urlopen(proxy.upstream.geturl() + "/v1/ledger", timeout=5) as response:
        return [(op["metadata"]["order_id"], op["object"], op["amount"]) for op in json.load(response)["data"]]


def order(n: int) -> str:
    return f"6f1c2a2e-0000-4000-8000-{n:012d}"


# Each is charged at the gateway (its honest answer a success) and answered with a lie: the outcome is unknown.
UNKNOWN_CHARGES = [
    "html",
    "notjson",
    "list",
    "nan",
    "nostatus",
    "nullamount",
    "pending",
    "otherkey",
    "otheramount",
    "othercurrency",
    "otherorder",
    "longid",
    "gzip",
    "gzipbomb",
    "html500",
    "reset",
    "redirect301",
    "redirect302",
    "redirect307",
    "redirect308",
]


@pytest.mark.parametrize("mangle", UNKNOWN_CHARGES)
def test_an_answer_it_cannot_believe_is_an_unknown_outcome_and_the_key_then_finds_the_truth(hostile, mangle):
    gateway = client(hostile.url)
    n = UNKNOWN_CHARGES.index(mangle)
    with pytest.raises(OutcomeUnknown):
        charge(gateway, order(n), f"tok_visa+{mangle}")
    # the look-up by key (answered honestly now) finds the charge the gateway made, once
    found = gateway.find(
        f"charge-{order(n)}", kind="charge", order_id=order(n), amount=Decimal("12.50"), currency="USD"
    )
    assert (found.succeeded, found.amount, found.currency) == (True, Decimal("12.50"), "USD")
    assert ledger(hostile) == [(order(n), "charge", 1250)]
    assert hostile.elsewhere.requests == []  # no redirect followed: the token went nowhere else


def test_a_decline_without_its_charge_and_a_404_that_is_not_the_apis_are_unknown(hostile):
    gateway = client(hostile.url)
    with pytest.raises(UnbelievableAnswer):  # a 402 naming no charge: not a decline
        charge(gateway, order(1), "tok_chargeDeclined+nocharge")
    with pytest.raises(UnbelievableAnswer):  # a 404 that is not the API's: not "nothing under the key"
        charge(gateway, order(2), "tok_visa+notjson404")
    assert charge(gateway, order(2), "tok_visa").succeeded  # the same key: the first result
    assert ledger(hostile) == [(order(2), "charge", 1250)]


@pytest.mark.parametrize("mangle", ["otheramount", "otherkey", "notjson404", "pending"])
def test_a_look_up_that_lies_is_neither_nothing_nor_another_charge(hostile, mangle):
    hostile.times = 2  # the charge's answer and the first look-up's
    gateway = client(hostile.url)
    with pytest.raises(OutcomeUnknown):
        charge(gateway, order(1), f"tok_visa+{mangle}")
    expected = {"kind": "charge", "order_id": order(1), "amount": Decimal("12.50"), "currency": "USD"}
    with pytest.raises(OutcomeUnknown):
        gateway.find(f"charge-{order(1)}", **expected)
    assert gateway.find(f"charge-{order(1)}", **expected).succeeded  # the third answer, honest
    assert gateway.find(f"charge-{order(2)}", **{**expected, "order_id": order(2)}) is None


def test_a_refund_answered_failed_comes_back_failed(hostile):
    gateway = client(hostile.url)
    charged = charge(gateway, order(1), "tok_visa+failed@refund")
    refund = {"idempotency_key": f"refund-{order(1)}", "charge_key": f"charge-{order(1)}", "order_id": order(1)}
    made = gateway.refund(**refund, charge_id=charged.operation_id, amount=Decimal("12.50"), currency="USD")
    assert (made.succeeded, made.decline_code) == (False, "card_declined")  # payments then owes it still
    # the gateway did refund it: the look-up by key, answered honestly, says so
    found = gateway.find(refund["idempotency_key"], kind="refund", order_id=order(1), amount=Decimal("12.50"))
    assert found.succeeded is True
    assert ledger(hostile) == [(order(1), "charge", 1250), (order(1), "refund", 1250)]


def test_an_answer_that_trickles_is_cut_at_the_calls_deadline(hostile):
    gateway = client(hostile.url, timeout=2.0)
    started = time.monotonic()
    with pytest.raises(GatewayTimeout, match="no answer within GATEWAY_TIMEOUT"):
        charge(gateway, order(1), "tok_visa+drip")  # a byte every 0.5 s: each read is quick, the whole is not
    assert 2.0 <= time.monotonic() - started < 3.0
    assert charge(gateway, order(1), "tok_visa").succeeded  # the pool's next connection works


def test_an_endless_answer_is_refused_after_a_few_kilobytes(hostile):
    gateway = client(hostile.url)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(UnbelievableAnswer, match="more than 16384 bytes"):
        charge(gateway, order(1), "tok_visa+huge")
    assert time.monotonic() - started < 2.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 20_000  # KB: not the gigabyte


def test_a_throttled_or_unavailable_gateway_says_when_to_call_again_within_bounds(hostile):
    with pytest.raises(GatewayUnavailable) as throttled:
        charge(client(hostile.url), order(1), "tok_visa+throttled")
    assert throttled.value.retry_after == 1.0
    assert ledger(hostile) == [(order(1), "charge", 1250)]  # (the proxy lied: a real 429 charges nothing)
    assert _retry_after("120") == 120.0
    assert _retry_after("99999999") == MAX_RETRY_AFTER
    assert _retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past: now
    assert _retry_after("soon") is None and _retry_after("") is None and _retry_after(None) is None


# --- the gateway worker behind the lying gateway ---------------------------------------------------
# "failed" on a charge is a decline the client must believe (the gateway's word that it charged
# nothing); on a refund it is a refusal.
CHARGE_LIES = [m for m in MANGLES if m != "failed"]
REFUND_LIES = [m for m in MANGLES if m not in ("nocharge", "notjson404")]


def test_the_worker_outlives_every_lie_and_every_order_ends_as_the_gateways_ledger_says(processes, quiet_broker):
    # given the saga, its gateway worker and consumers talking to the fake gateway through the liar
    processes.start_gateway()
    proxy = HostileGateway(processes.env["GATEWAY_URL"])
    worker = {**FAST_RETRIES, "GATEWAY_URL": proxy.url, "GATEWAY_TIMEOUT": "2", "GATEWAY_CHARGE_ATTEMPTS": "8"}
    calls = processes.start("calls", "run_gateway_calls", env=worker)
    processes.start("relay", "run_outbox_relay")
    processes.start("consumers", "run_consumers", env=worker)
    seed_catalog(catalog=CATALOG)

    # when each lie answers one order's charge, and each lie one confirmed order's refund
    def place(token: str):
        return order_place(customer_id="liar", lines=[Line("WIDGET", 1)], payment_token=token).id

    confirmed = {lie: place(f"tok_visa+{lie}@charge") for lie in CHARGE_LIES}
    cancelled = {lie: place(f"tok_visa+{lie}@refund") for lie in REFUND_LIES}
    wait_terminal([*confirmed.values(), *cancelled.values()], timeout=120)
    for order_id in cancelled.values():
        order_cancel(order_id=order_id)
    in_flight = [Payment.Status.CHARGING, Payment.Status.REFUNDING]
    wait_until(lambda: not Payment.objects.filter(status__in=in_flight).exists(), timeout=120, message="every call")
    wait_quiet(timeout=60)

    # then the worker never stopped, nothing reached another host, and every order is what the
    # gateway's own ledger says: each charged once, the cancelled ones refunded once
    try:
        assert calls.poll() is None
        assert proxy.elsewhere.requests == []
        assert {lie: proxy.mangled.get((str(o), "charge")) for lie, o in confirmed.items()} == dict.fromkeys(
            CHARGE_LIES, 1
        )
        assert {lie: proxy.mangled.get((str(o), "refund")) for lie, o in cancelled.items()} == dict.fromkeys(
            REFUND_LIES, 1
        )
    finally:
        proxy.close()
    orders = {**{o: "CONFIRMED" for o in confirmed.values()}, **{o: "CANCELLED" for o in cancelled.values()}}
    assert dict(Order.objects.filter(pk__in=list(orders)).values_list("pk", "status")) == orders
    payments = Payment.objects.filter(order_id__in=list(orders))
    assert sorted(payments.values_list("status", "call_error")) == sorted(
        [("charged", "")] * len(confirmed) + [("refunded", "")] * len(cancelled)
    )
    widget = next(price for sku, _, price, _ in CATALOG if sku == "WIDGET")
    expected = [(str(o), "charge", widget) for o in orders] + [(str(o), "refund", widget) for o in cancelled.values()]
    assert sorted((op.order_id, op.kind, op.amount) for op in stored.ledger()) == sorted(expected)
    report = check_invariants(initial_stock=INITIAL_STOCK, cancelled=list(cancelled.values()))
    assert report.violations == [], str(report)


def test_sigterm_stops_the_worker_within_gateway_timeout_whatever_the_answer_in_the_air(processes, quiet_broker):
    # given the gateway worker with a call in the air whose answer trickles for minutes
    processes.start_gateway()
    proxy = HostileGateway(processes.env["GATEWAY_URL"])
    worker = {**FAST_RETRIES, "GATEWAY_URL": proxy.url, "GATEWAY_TIMEOUT": "3"}
    calls = processes.start("calls", "run_gateway_calls", env=worker)
    processes.start("relay", "run_outbox_relay")
    processes.start("consumers", "run_consumers", env=worker)
    seed_catalog(catalog=CATALOG)
    order = order_place(customer_id="drip", lines=[Line("WIDGET", 1)], payment_token="tok_visa+drip")
    try:
        wait_until(lambda: proxy.mangled.get((str(order.id), "charge")), timeout=60, message="the call in the air")
        # when it is told to stop
        started = time.monotonic()
        code = processes.stop(calls, timeout=30)
        elapsed = time.monotonic() - started
        # then it stops, cleanly, having given the call up at GATEWAY_TIMEOUT, not read it to its end
        # (a byte every 0.5 s: about a minute); a process's exit on a busy machine takes seconds more
        assert code == 0 and elapsed < 3 + 7, elapsed
        events = [line.get("event", "") for line in processes.log_lines(calls)]
        gave_up = [e for e in events if str(order.id) in e and e.endswith("no answer within GATEWAY_TIMEOUT (3 s)")]
        assert len(gave_up) == 1, events
    finally:
        proxy.close()
