"""The fake gateway's ledger and rules, Stripe-style, as its HTTP service (server.py) and its
in-process stand-in (in_process.py) both apply them.

- Test tokens: ``tok_visa`` is charged; ``tok_chargeDeclined`` and any unknown token are
  declined (a decline moves no money). ``tok_timeout`` is charged but the first answer is
  lost; ``tok_unavailable`` always fails (``Unavailable``) before charging; ``tok_slow`` is
  charged and answered after ``FAKE_GATEWAY_DELAY`` seconds (default 5), like a gateway having a
  bad day; ``tok_hang`` is charged and then never answered, like a gateway that took the request
  and hung. A retry with the same key is answered from the ledger (the first result).
- Every charge and refund carries an idempotency key: the same key returns the first result
  and moves no more money; the same key with other parameters is an error (``KeyReused``).
- A charge is refunded at most once, whatever key the refund uses (``NotRefundable``).
- The ledger lives on its own database connection (the ``gateway`` alias) in autocommit, so a
  rollback of a caller's transaction does not undo a charge, as with a real card.
"""

import os
from decimal import Decimal

from django.core.management import call_command
from django.db import IntegrityError, connections

from fake_gateway.conf import DATABASE
from fake_gateway.models import GatewayOperation

CHARGEABLE_TOKENS = {"tok_visa", "tok_timeout", "tok_slow", "tok_hang"}


class Unavailable(Exception):
    """The gateway refuses to work; nothing happened."""


class KeyReused(Exception):
    """The key was used for another operation."""


class NotRefundable(Exception):
    """No successful charge to refund, or it is refunded already."""


def slow_delay() -> float:
    """How long ``tok_slow`` takes to be answered."""
    return float(os.environ.get("FAKE_GATEWAY_DELAY", "5"))


def operation_id(op: GatewayOperation) -> str:
    return f"{'ch' if op.kind == GatewayOperation.Kind.CHARGE else 're'}_{op.pk}"


def operations():
    return GatewayOperation.objects.using(DATABASE)


def ensure_storage() -> None:
    """The ledger's table on its own database, migrated if it is not there yet: the fake gateway
    prepares its own storage (``prepare_deployment`` migrates the deployment's, not the fake's)."""
    if GatewayOperation._meta.db_table not in connections[DATABASE].introspection.table_names():
        call_command("migrate", "fake_gateway", database=DATABASE, interactive=False, verbosity=0)


def look_up(key: str) -> GatewayOperation | None:
    """The charge or refund made under ``key``."""
    return operations().filter(idempotency_key=key).first()


def _existing(key: str, kind: str, amount: Decimal) -> GatewayOperation | None:
    op = look_up(key)
    if op and (op.kind != kind or op.amount != amount):
        raise KeyReused(f"{key} was used for a {op.kind} of {op.amount}")
    return op


def record_charge(
    *, idempotency_key: str, order_id: str, amount: Decimal, currency: str, token: str
) -> tuple[GatewayOperation, bool]:
    """The charge under this key, made now unless it exists; and whether it was made now."""
    existing = _existing(idempotency_key, GatewayOperation.Kind.CHARGE, amount)
    if existing:
        return existing, False
    if token == "tok_unavailable":
        raise Unavailable("the gateway is unavailable")
    chargeable = token in CHARGEABLE_TOKENS
    try:
        op = operations().create(
            idempotency_key=idempotency_key,
            kind=GatewayOperation.Kind.CHARGE,
            outcome=GatewayOperation.Outcome.SUCCEEDED if chargeable else GatewayOperation.Outcome.DECLINED,
            order_id=order_id,
            amount=amount,
            currency=currency,
            decline_code="" if chargeable else ("card_declined" if token == "tok_chargeDeclined" else "invalid_token"),
        )
    except IntegrityError:  # the same key at the same moment: the first one wins
        return _existing(idempotency_key, GatewayOperation.Kind.CHARGE, amount), False
    return op, True


def record_refund(
    *, idempotency_key: str, amount: Decimal, charge_key: str = "", charge_id: str = ""
) -> GatewayOperation:
    """The refund under this key, made now unless it exists, of the charge made under ``charge_key``
    or named ``charge_id`` (its ``ch_<n>``, what the HTTP API names it by)."""
    existing = _existing(idempotency_key, GatewayOperation.Kind.REFUND, amount)
    if existing:
        return existing
    charges = operations().filter(kind=GatewayOperation.Kind.CHARGE)
    charge = charges.filter(idempotency_key=charge_key).first() if charge_key else None
    if charge is None and charge_id.startswith("ch_") and charge_id[3:].isdigit():
        charge = charges.filter(pk=int(charge_id[3:])).first()
    if charge is None or charge.outcome != GatewayOperation.Outcome.SUCCEEDED:
        raise NotRefundable(f"no successful charge {charge_key or charge_id}")
    if amount > charge.amount:
        raise NotRefundable(f"refund {amount} exceeds charge {charge.amount}")
    try:
        return operations().create(
            idempotency_key=idempotency_key,
            kind=GatewayOperation.Kind.REFUND,
            outcome=GatewayOperation.Outcome.SUCCEEDED,
            order_id=charge.order_id,
            amount=amount,
            currency=charge.currency,
            refunded_charge_key=charge.idempotency_key,
        )
    except IntegrityError:
        existing = look_up(idempotency_key)
        if existing:
            return existing
        raise NotRefundable(f"charge {charge.idempotency_key} is already refunded") from None


def money_moved(*, order_id: str | None = None) -> list[GatewayOperation]:
    """The money moved: successful charges and refunds, oldest first."""
    ops = operations().filter(outcome=GatewayOperation.Outcome.SUCCEEDED)
    if order_id:
        ops = ops.filter(order_id=order_id)
    return list(ops.order_by("id"))
