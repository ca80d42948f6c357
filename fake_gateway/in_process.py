"""The fake gateway inside the caller's process: payments' client interface (``charge``, ``find``,
``refund``, ``ledger``; the results and exceptions of payments/gateway.py) over the fake's ledger,
with no HTTP. ``GATEWAY_URL=inprocess:`` picks it where ``GATEWAY_IN_PROCESS`` names it
(config/settings.py does, where the fake gateway is installed): the unit and integration tiers, and
a test process reading the ledger its gateway service writes.

The only module of the fake that knows payments: a test double implements the interface of what it
stands in for. ``tok_timeout``, ``tok_slow`` and ``tok_hang`` are answered as the HTTP client would
see them: the caller waits at most ``GATEWAY_TIMEOUT`` (payments' setting) for an answer, and a later
one is a ``GatewayTimeout`` after that long, the charge having been made.
"""

import math
import time
from contextlib import contextmanager
from decimal import Decimal

from fake_gateway import ledger as fake_ledger
from fake_gateway.models import GatewayOperation
from payments.conf import setting
from payments.gateway import (
    ChargeNotRefundable,
    GatewayResult,
    GatewayTimeout,
    GatewayUnavailable,
    IdempotencyKeyReused,
)


def _answer_after(seconds: float) -> None:
    """The answer takes this long to reach the caller, who waits at most GATEWAY_TIMEOUT."""
    timeout = setting("GATEWAY_TIMEOUT")
    if seconds <= timeout:
        time.sleep(seconds)
        return
    time.sleep(timeout)
    raise GatewayTimeout(f"no answer within GATEWAY_TIMEOUT ({timeout:g} s)")


def _result(op: GatewayOperation) -> GatewayResult:
    return GatewayResult(
        succeeded=op.outcome == GatewayOperation.Outcome.SUCCEEDED,
        operation_id=fake_ledger.operation_id(op),
        amount=op.amount,
        currency=op.currency,
        decline_code=op.decline_code,
    )


@contextmanager
def _as_payments_sees_it():
    """The ledger's refusals as payments' client raises them."""
    try:
        yield
    except fake_ledger.Unavailable as exc:
        raise GatewayUnavailable(str(exc)) from None
    except fake_ledger.KeyReused as exc:
        raise IdempotencyKeyReused(str(exc)) from None
    except fake_ledger.NotRefundable as exc:
        raise ChargeNotRefundable(str(exc)) from None


class InProcessGateway:
    """The ledger's database is migrated at its first use here, as the service does as it starts
    (a deployment of one-shot passes, with no gateway service, has nothing else to migrate it)."""

    storage_ready = False

    def _ready(self) -> None:
        if not self.storage_ready:
            fake_ledger.ensure_storage()
            self.storage_ready = True

    def charge(
        self, *, idempotency_key: str, order_id: str, amount: Decimal, currency: str, token: str
    ) -> GatewayResult:
        self._ready()
        with _as_payments_sees_it():
            op, made_now = fake_ledger.record_charge(
                idempotency_key=idempotency_key, order_id=order_id, amount=amount, currency=currency, token=token
            )
        if made_now and token == "tok_timeout":
            raise GatewayTimeout("charged, but the response was lost")
        if made_now and token == "tok_slow":
            _answer_after(fake_ledger.slow_delay())
        if made_now and token == "tok_hang":
            _answer_after(math.inf)
        return _result(op)

    def find(self, idempotency_key: str, **_expected) -> GatewayResult | None:
        """What became of an operation whose outcome is unknown. ``_expected`` is what the HTTP client
        checks an answer against (payments/gateway_client.py); the ledger is its own answer."""
        self._ready()
        op = fake_ledger.look_up(idempotency_key)
        return _result(op) if op else None

    def refund(
        self, *, idempotency_key: str, charge_key: str, amount: Decimal, charge_id: str = "", **_expected
    ) -> GatewayResult:
        """Refund the charge made under ``charge_key`` (or named ``charge_id``). ``_expected``: as for ``find``."""
        self._ready()
        with _as_payments_sees_it():
            op = fake_ledger.record_refund(
                idempotency_key=idempotency_key, amount=amount, charge_key=charge_key, charge_id=charge_id
            )
        return _result(op)

    def ledger(self, *, order_id: str | None = None) -> list[GatewayOperation]:
        """The money moved: successful charges and refunds, oldest first (each with ``order_id``,
        ``kind``, ``amount``, ``currency`` and ``idempotency_key``, as payments' ``LedgerEntry``)."""
        self._ready()
        return fake_ledger.money_moved(order_id=order_id)


gateway = InProcessGateway()
