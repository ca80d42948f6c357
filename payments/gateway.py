"""A fake payment gateway that behaves like a real one (Stripe-style), for tests and demos.

- Test tokens: ``tok_visa`` is charged; ``tok_chargeDeclined`` and any unknown token are
  declined (a decline moves no money). ``tok_timeout`` is charged but the first response is
  lost (``GatewayTimeout``: the caller cannot know the outcome); ``tok_unavailable`` always
  fails with ``GatewayUnavailable`` before charging; ``tok_slow`` is charged and answered
  after ``FAKE_GATEWAY_DELAY`` seconds (default 5), like a gateway having a bad day; ``tok_hang`` is
  charged and then never answered, like a gateway that took the request and hung: the caller
  gives up after ``GATEWAY_TIMEOUT`` (``GatewayTimeout``) and a retry with the same key is
  answered from the gateway's idempotency store, as for ``tok_timeout``.
- The caller waits at most ``setting("GATEWAY_TIMEOUT")`` for an answer, as a real client's read
  timeout: an answer later than that (``tok_slow`` with a longer delay, ``tok_hang``) is a
  ``GatewayTimeout`` after that long, the charge having been made on the gateway's side.
- Every charge and refund carries an idempotency key: the same key returns the first result
  and moves no more money; the same key with other parameters is an error.
- A charge is refunded at most once, whatever key the refund uses.
- The ledger lives on the ``gateway`` database connection in autocommit, so a rollback of the
  caller's transaction does not undo a charge, as with a real card.

This module is the fake's ledger and rules. The HTTP service (``payments/gateway_server.py``, the
Procfile's ``gateway``) serves them to payments over the network, with the answers' pace; the
``FakeGateway`` object itself is the in-process stand-in of the unit and integration tiers
(``GATEWAY_URL=inprocess:``), answering ``tok_timeout``, ``tok_slow`` and ``tok_hang`` in-process.
"""

import math
import os
import time
from dataclasses import dataclass
from decimal import Decimal

from django.db import IntegrityError

from payments.conf import setting
from payments.models import GatewayOperation

GATEWAY_DB = "gateway"
CHARGEABLE_TOKENS = {"tok_visa", "tok_timeout", "tok_slow", "tok_hang"}


class GatewayError(Exception):
    pass


class OutcomeUnknown(GatewayError):
    """The operation may or may not have happened: it is asked about by its key later, as after a crash."""


class GatewayTimeout(OutcomeUnknown):
    """No (whole) answer in time."""


class UnbelievableAnswer(OutcomeUnknown):
    """An answer not taken at its word: malformed, too big, a redirect, pending, or about another operation."""


class GatewayUnavailable(GatewayError):
    """The gateway refused to work (503, 429); nothing happened. ``retry_after``: when it asked to be called again."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class RefundFailed(GatewayError):
    """The gateway answered that the refund failed: the money is still owed."""


class IdempotencyKeyReused(GatewayError):
    pass


class ChargeNotRefundable(GatewayError):
    pass


@dataclass(frozen=True)
class GatewayResult:
    succeeded: bool
    operation_id: str
    amount: Decimal
    currency: str
    decline_code: str = ""


def slow_delay() -> float:
    """How long ``tok_slow`` takes to be answered."""
    return float(os.environ.get("FAKE_GATEWAY_DELAY", "5"))


def _answer_after(seconds: float) -> None:
    """The answer takes this long to reach the caller, who waits at most GATEWAY_TIMEOUT."""
    timeout = setting("GATEWAY_TIMEOUT")
    if seconds <= timeout:
        time.sleep(seconds)
        return
    time.sleep(timeout)
    raise GatewayTimeout(f"no answer within GATEWAY_TIMEOUT ({timeout:g} s)")


def operation_id(op: GatewayOperation) -> str:
    return f"{'ch' if op.kind == GatewayOperation.Kind.CHARGE else 're'}_{op.pk}"


def _result(op: GatewayOperation) -> GatewayResult:
    return GatewayResult(
        succeeded=op.outcome == GatewayOperation.Outcome.SUCCEEDED,
        operation_id=operation_id(op),
        amount=op.amount,
        currency=op.currency,
        decline_code=op.decline_code,
    )


class FakeGateway:
    def _operations(self):
        return GatewayOperation.objects.using(GATEWAY_DB)

    def _existing(self, key: str, kind: str, amount: Decimal) -> GatewayOperation | None:
        op = self._operations().filter(idempotency_key=key).first()
        if op and (op.kind != kind or op.amount != amount):
            raise IdempotencyKeyReused(f"{key} was used for a {op.kind} of {op.amount}")
        return op

    def record_charge(
        self, *, idempotency_key: str, order_id: str, amount: Decimal, currency: str, token: str
    ) -> tuple[GatewayOperation, bool]:
        """The charge under this key, made now unless it exists; and whether it was made now."""
        existing = self._existing(idempotency_key, GatewayOperation.Kind.CHARGE, amount)
        if existing:
            return existing, False
        if token == "tok_unavailable":
            raise GatewayUnavailable("the gateway is unavailable")
        chargeable = token in CHARGEABLE_TOKENS
        try:
            op = self._operations().create(
                idempotency_key=idempotency_key,
                kind=GatewayOperation.Kind.CHARGE,
                outcome=GatewayOperation.Outcome.SUCCEEDED if chargeable else GatewayOperation.Outcome.DECLINED,
                order_id=order_id,
                amount=amount,
                currency=currency,
                decline_code=""
                if chargeable
                else ("card_declined" if token == "tok_chargeDeclined" else "invalid_token"),
            )
        except IntegrityError:  # the same key at the same moment: the first one wins
            return self._existing(idempotency_key, GatewayOperation.Kind.CHARGE, amount), False
        return op, True

    def charge(
        self, *, idempotency_key: str, order_id: str, amount: Decimal, currency: str, token: str
    ) -> GatewayResult:
        op, made_now = self.record_charge(
            idempotency_key=idempotency_key, order_id=order_id, amount=amount, currency=currency, token=token
        )
        if made_now and token == "tok_timeout":
            raise GatewayTimeout("charged, but the response was lost")
        if made_now and token == "tok_slow":
            _answer_after(slow_delay())
        if made_now and token == "tok_hang":
            _answer_after(math.inf)
        return _result(op)

    def find(self, idempotency_key: str, **_expected) -> GatewayResult | None:
        """Ask what became of an operation whose outcome is unknown. ``_expected`` is what the HTTP
        client checks an answer against (payments/gateway_client.py); this ledger is its own answer."""
        op = self._operations().filter(idempotency_key=idempotency_key).first()
        return _result(op) if op else None

    def refund(
        self, *, idempotency_key: str, charge_key: str, amount: Decimal, charge_id: str = "", **_expected
    ) -> GatewayResult:
        """Refund the charge made under ``charge_key`` (``charge_id``, its ``ch_<n>``, is what the HTTP
        API names it by; either finds it). ``_expected``: as for ``find``."""
        existing = self._existing(idempotency_key, GatewayOperation.Kind.REFUND, amount)
        if existing:
            return _result(existing)
        charges = self._operations().filter(kind=GatewayOperation.Kind.CHARGE)
        charge = charges.filter(idempotency_key=charge_key).first() if charge_key else None
        if charge is None and charge_id.startswith("ch_") and charge_id[3:].isdigit():
            charge = charges.filter(pk=int(charge_id[3:])).first()
        if charge is None or charge.outcome != GatewayOperation.Outcome.SUCCEEDED:
            raise ChargeNotRefundable(f"no successful charge {charge_key or charge_id}")
        if amount > charge.amount:
            raise ChargeNotRefundable(f"refund {amount} exceeds charge {charge.amount}")
        try:
            op = self._operations().create(
                idempotency_key=idempotency_key,
                kind=GatewayOperation.Kind.REFUND,
                outcome=GatewayOperation.Outcome.SUCCEEDED,
                order_id=charge.order_id,
                amount=amount,
                currency=charge.currency,
                refunded_charge_key=charge.idempotency_key,
            )
        except IntegrityError:
            existing = self._operations().filter(idempotency_key=idempotency_key).first()
            if existing:
                return _result(existing)
            raise ChargeNotRefundable(f"charge {charge.idempotency_key} is already refunded") from None
        return _result(op)

    def ledger(self, *, order_id: str | None = None) -> list[GatewayOperation]:
        """The money moved: successful charges and refunds, oldest first."""
        ops = self._operations().filter(outcome=GatewayOperation.Outcome.SUCCEEDED)
        if order_id:
            ops = ops.filter(order_id=order_id)
        return list(ops.order_by("id"))


gateway = FakeGateway()
