"""A gateway that never answers: the caller's timeout, the ledger, and a batch that does not wait twice.

In process, on PostgreSQL, with ``GATEWAY_TIMEOUT`` cut to a fraction of a second. The whole
saga with ``tok_hang`` among ordinary orders, in real processes, is in ``tests/e2e/test_gateway_calls.py``.
"""

import json
import time
import uuid
from decimal import Decimal

import pytest
from django.test import override_settings
from django.utils import timezone
from reliable_messaging import _registry as registry
from reliable_messaging._dispatch import Delivery, Outcome, TransientError, decide_batch

from fake_gateway.in_process import gateway
from faultlib.fixtures import ALL_DATABASES
from faultlib.load import order_created_payload
from faultlib.saga import ledger
from payments.gateway import GatewayTimeout
from payments.gateway_calls import run_due_calls
from payments.models import Payment

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

TIMEOUT = 0.3
EVENT = "orders.order.created"


def charge(order_id: str, token: str):
    return gateway.charge(
        idempotency_key=f"charge-{order_id}", order_id=order_id, amount=Decimal("12.50"), currency="USD", token=token
    )


def timed(call):
    started = time.monotonic()
    try:
        return call(), time.monotonic() - started
    except GatewayTimeout as exc:
        return exc, time.monotonic() - started


@override_settings(GATEWAY_TIMEOUT=TIMEOUT)
def test_tok_hang_is_charged_never_answered_and_a_retry_with_the_key_finds_the_charge():
    order_id = str(uuid.uuid4())

    first, waited = timed(lambda: charge(order_id, "tok_hang"))
    again, replayed_in = timed(lambda: charge(order_id, "tok_hang"))

    assert isinstance(first, GatewayTimeout)
    assert str(first) == "no answer within GATEWAY_TIMEOUT (0.3 s)"
    assert TIMEOUT <= waited < TIMEOUT + 1.0
    assert (again.succeeded, again.amount) == (True, Decimal("12.50"))
    assert replayed_in < TIMEOUT  # answered from the idempotency store, not hung again
    assert ledger(order_id) == [("charge", Decimal("12.50"))]


@override_settings(GATEWAY_TIMEOUT=TIMEOUT)
def test_an_answer_slower_than_the_timeout_is_a_timeout_and_the_charge_stands(monkeypatch):
    monkeypatch.setenv("FAKE_GATEWAY_DELAY", "5")
    order_id = str(uuid.uuid4())

    first, waited = timed(lambda: charge(order_id, "tok_slow"))

    assert isinstance(first, GatewayTimeout)
    assert TIMEOUT <= waited < TIMEOUT + 1.0
    assert ledger(order_id) == [("charge", Decimal("12.50"))]


@override_settings(GATEWAY_TIMEOUT=5)
def test_an_answer_within_the_timeout_is_waited_for(monkeypatch):
    monkeypatch.setenv("FAKE_GATEWAY_DELAY", "0.2")
    order_id = str(uuid.uuid4())

    result, waited = timed(lambda: charge(order_id, "tok_slow"))

    assert result.succeeded is True
    assert 0.2 <= waited < 2
    assert ledger(order_id) == [("charge", Decimal("12.50"))]


def created(order_id: str, token: str, attempt: int = 1) -> Delivery:
    headers = {"event_type": EVENT, "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"}
    if attempt > 1:
        headers["x-attempt"] = attempt
    return Delivery(
        consumer="payments",
        body=json.dumps(order_created_payload(order_id, payment_token=token)).encode(),
        properties={"message_id": str(uuid.uuid4()), "correlation_id": order_id},
        headers=headers,
        routing_key=EVENT,
    )


@pytest.fixture
def charges_made(monkeypatch) -> list[str]:
    """The tokens of every charge call the payments handler makes."""
    calls: list[str] = []
    real = gateway.charge

    def spy(**kwargs):
        calls.append(kwargs["token"])
        return real(**kwargs)

    monkeypatch.setattr(gateway, "charge", spy)
    return calls


@override_settings(GATEWAY_TIMEOUT=TIMEOUT)
def test_a_hung_charge_holds_up_neither_its_batch_nor_the_other_calls_and_its_retry_confirms(charges_made):
    ids = sorted(str(uuid.uuid4()) for _ in range(3))
    batch = [created(ids[0], "tok_visa"), created(ids[1], "tok_hang"), created(ids[2], "tok_visa")]

    # the consumer's batch only records the three charges in flight: no call inside it
    assert [d.outcome for d in decide_batch(batch)] == [Outcome.HANDLED] * 3
    assert charges_made == []
    assert set(Payment.objects.values_list("status", flat=True)) == {"charging"}

    # the gateway worker's calls: the hung one times out and waits for its backoff, the others are charged
    assert run_due_calls() == 3
    assert sorted(charges_made) == ["tok_hang", "tok_visa", "tok_visa"]
    hung = Payment.objects.get(order_id=ids[1])
    assert (hung.status, hung.call_attempts) == ("charging", 1)
    assert [Payment.objects.get(order_id=i).status for i in (ids[0], ids[2])] == ["charged", "charged"]
    assert ledger(ids[1]) == [("charge", Decimal("10.00"))]  # made on the gateway's side

    # its next attempt asks the gateway by its key first: found, recorded, never charged again
    Payment.objects.filter(order_id=ids[1]).update(call_due_at=timezone.now())
    assert run_due_calls() == 1
    assert len(charges_made) == 3
    assert Payment.objects.get(order_id=ids[1]).status == "charged"
    assert [ledger(i) for i in ids] == [[("charge", Decimal("10.00"))]] * 3


def test_only_failures_that_say_later_skip_the_second_attempt(monkeypatch):
    """A member failing with anything else runs again in its savepoint (and may then pass)."""
    runs: list[str] = []

    def handler(event) -> None:
        runs.append(event.payload["behaviour"])
        if event.payload["behaviour"] == "later":
            raise TransientError("try again later")
        if event.payload["behaviour"] == "flaky" and runs.count("flaky") == 1:
            raise RuntimeError("first time only")

    monkeypatch.setitem(registry._handlers, "payments", {EVENT: registry.HandlerSpec("payments", EVENT, handler, (1,))})

    def delivery(behaviour: str) -> Delivery:
        message_id = str(uuid.uuid4())
        return Delivery(
            consumer="payments",
            body=json.dumps({"order_id": message_id, "behaviour": behaviour}).encode(),
            properties={"message_id": message_id, "correlation_id": behaviour},
            headers={"event_type": EVENT, "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"},
            routing_key=EVENT,
        )

    later = decide_batch([delivery("later"), delivery("ok")])
    flaky = decide_batch([delivery("flaky"), delivery("ok")])

    assert [d.outcome for d in later] == [Outcome.RETRY, Outcome.HANDLED]
    assert [d.outcome for d in flaky] == [Outcome.HANDLED, Outcome.HANDLED]
    # Each batch's first attempt stops at its first member's failure; the second attempt runs
    # "ok" alone after "later", but "flaky" again (and it passes).
    assert runs == ["later", "ok", "flaky", "flaky", "ok"]
