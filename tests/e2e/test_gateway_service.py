"""The fake gateway as its own process (``run_fake_gateway``) and payments' HTTP client of it: the
Stripe-shaped API, the test tokens, idempotency keys, what is retried, its own storage across a
SIGKILL, calls that overlap."""

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

import pytest

from fake_gateway.in_process import gateway as stored
from faultlib.fixtures import ALL_DATABASES
from payments.gateway import ChargeNotRefundable, GatewayTimeout, GatewayUnavailable, IdempotencyKeyReused
from payments.gateway_client import HttpGateway

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


@pytest.fixture
def service(processes):
    processes.start_gateway()
    return processes.env["GATEWAY_URL"]


def client(url: str, timeout: float = 5.0) -> HttpGateway:
    return HttpGateway(url, timeout=timeout, pool_size=16)


def charge(gateway: HttpGateway, key: str, token: str = "tok_visa", amount: str = "12.50"):
    return gateway.charge(
        idempotency_key=key, order_id=f"order-{key}", amount=Decimal(amount), currency="USD", token=token
    )


def find(gateway: HttpGateway, key: str):
    return gateway.find(key, kind="charge", order_id=f"order-{key}")


def refund(gateway: HttpGateway, key: str, charge_key: str, **charge_id):
    return gateway.refund(
        idempotency_key=key, charge_key=charge_key, order_id=f"order-{charge_key}", amount=Decimal("12.50"), **charge_id
    )


def money(url: str) -> list[tuple[str, str, int]]:
    with urllib.request.urlopen(f"{url}/v1/ledger", timeout=5) as response:
        return [(op["idempotency_key"], op["object"], op["amount"]) for op in json.load(response)["data"]]


def test_charges_refunds_and_look_ups_by_key(service):
    gateway = client(service)
    first = charge(gateway, "c1")
    assert (first.succeeded, first.amount, first.currency) == (True, Decimal("12.50"), "USD")
    assert charge(gateway, "c1") == first  # the same key: the first result, no second charge
    with pytest.raises(IdempotencyKeyReused):
        charge(gateway, "c1", amount="13.00")
    declined = charge(gateway, "c2", token="tok_chargeDeclined")
    assert (declined.succeeded, declined.decline_code) == (False, "card_declined")
    assert charge(gateway, "c3", token="tok_nonsense").decline_code == "invalid_token"
    with pytest.raises(GatewayUnavailable):
        charge(gateway, "c4", token="tok_unavailable")
    assert find(gateway, "c1") == first and find(gateway, "c2") == declined and find(gateway, "c4") is None

    refunded = refund(gateway, "r1", "c1", charge_id=first.operation_id)
    assert refund(gateway, "r1", "c1") == refunded
    with pytest.raises(ChargeNotRefundable):  # a charge is refunded at most once, whatever the key
        refund(gateway, "r2", "c1", charge_id=first.operation_id)
    with pytest.raises(ChargeNotRefundable):
        refund(gateway, "r3", "c2", charge_id=declined.operation_id)
    assert money(service) == [("c1", "charge", 1250), ("r1", "refund", 1250)]


def test_a_lost_answer_and_a_hung_one_are_timeouts_and_the_key_finds_the_charge(service):
    gateway = client(service, timeout=1.0)
    with pytest.raises(GatewayTimeout):
        charge(gateway, "t1", token="tok_timeout")  # charged, the connection closed without an answer
    assert charge(gateway, "t1", token="tok_timeout").succeeded
    started = time.monotonic()
    with pytest.raises(GatewayTimeout):
        charge(gateway, "h1", token="tok_hang")
    assert 1.0 <= time.monotonic() - started < 2.0  # one read timeout: a POST is never repeated
    assert find(gateway, "h1").succeeded
    assert money(service) == [("t1", "charge", 1250), ("h1", "charge", 1250)]


def test_a_gateway_that_is_down_is_unavailable_and_its_ledger_outlives_a_sigkill(processes, service):
    gateway = client(service)
    made = charge(gateway, "k1")
    processes.kill(processes.gateway)
    with pytest.raises(GatewayUnavailable):  # refused: the request never left, nothing happened
        charge(gateway, "k2")
    processes.start_gateway()
    assert find(gateway, "k1") == made and find(gateway, "k2") is None
    assert money(service) == [("k1", "charge", 1250)]


def test_the_latency_model_and_answers_that_never_come(processes):
    processes.start_gateway(env={"FAKE_GATEWAY_LATENCY": "300", "FAKE_GATEWAY_TIMEOUT_RATE": "0"})
    url = processes.env["GATEWAY_URL"]
    gateway = client(url)
    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:  # 16 calls in the air at once through one pooled client
        results = list(pool.map(lambda n: charge(gateway, f"p{n}"), range(16)))
    elapsed = time.monotonic() - started
    assert [r.succeeded for r in results] == [True] * 16
    # one at a time they would take 16 medians (4.8 s); overlapping, about the slowest one's
    assert elapsed < 3.0, elapsed

    processes.stop(processes.gateway)
    processes.start_gateway(env={"FAKE_GATEWAY_TIMEOUT_RATE": "1"})
    with pytest.raises(GatewayTimeout):  # done, never answered: the storage has it
        charge(client(url, timeout=0.5), "never-answered")
    assert sorted(op.idempotency_key for op in stored.ledger()) == sorted(
        [*(f"p{n}" for n in range(16)), "never-answered"]
    )
