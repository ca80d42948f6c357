"""The card gateway as payments sees it: what a call answers (``GatewayResult``, a ``LedgerEntry``)
and how it fails. payments/gateway_client.py speaks the gateway's HTTP API in these terms.

- ``GatewayUnavailable``: the gateway refused to work (503, 429, unreachable); nothing happened.
- ``OutcomeUnknown`` (``GatewayTimeout``, ``UnbelievableAnswer``): the operation may or may not have
  happened; it is asked about by its idempotency key later, as after a crash.
- ``IdempotencyKeyReused``, ``ChargeNotRefundable``, ``RefundFailed``: refused, nothing happened.

The gateway the shop runs in development and tests is the fake one (fake_gateway/, a service of its
own; its test tokens are in docs/running.md); payments knows it only by its HTTP API.
"""

from dataclasses import dataclass
from decimal import Decimal


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


@dataclass(frozen=True)
class LedgerEntry:
    """Money the gateway moved (``GET /v1/ledger``): a successful charge or refund."""

    order_id: str
    kind: str  # "charge" or "refund"
    amount: Decimal
    currency: str
    idempotency_key: str
