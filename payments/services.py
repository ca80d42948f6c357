"""Payments' writes: charge an order once, refund it at most once.

The gateway call happens inside the handler's transaction, holding the order's payment row
lock; the idempotency keys (derived from the order) make a retried or redelivered call
return the first result instead of moving money again.
"""

import logging
import uuid
from contextlib import contextmanager
from decimal import Decimal

from django.db import transaction

from messaging.api import TransientError, publish
from payments.gateway import GatewayTimeout, GatewayUnavailable
from payments.gateway_client import gateway
from payments.models import Payment

logger = logging.getLogger(__name__)


def charge_key(order_id: uuid.UUID) -> str:
    return f"charge-{order_id}"


def refund_key(order_id: uuid.UUID) -> str:
    return f"refund-{order_id}"


@contextmanager
def gateway_call():
    """A gateway that timed out or is unavailable: the message is retried later with the same
    idempotency key, and the gateway then tells what happened."""
    try:
        yield
    except (GatewayTimeout, GatewayUnavailable) as exc:
        raise TransientError(f"gateway: {exc}") from exc


def _lock_payment(order_id: uuid.UUID) -> Payment:
    """Lock this order's record, creating it first: all handlers of one order take turns."""
    Payment.objects.bulk_create([Payment(order_id=order_id)], ignore_conflicts=True)
    return Payment.objects.select_for_update().get(order_id=order_id)


@transaction.atomic(savepoint=False)
def payment_charge(*, order_id: uuid.UUID, amount: Decimal, currency: str, token: str, items: list) -> None:
    payment = _lock_payment(order_id)
    if payment.status != Payment.Status.NEW:
        logger.info("charge ignored: payment is already %s", payment.status)
        return
    with gateway_call():
        result = gateway.charge(
            idempotency_key=charge_key(order_id), order_id=str(order_id), amount=amount, currency=currency, token=token
        )
    payment.amount, payment.currency = amount, currency
    if result.succeeded:
        payment.status, payment.charge_id = Payment.Status.CHARGED, result.operation_id
        payment.save()
        publish(
            event_type="payments.payment.succeeded",
            aggregate_type="payment",
            aggregate_id=str(order_id),
            payload={
                "order_id": str(order_id),
                "amount": f"{amount:.2f}",
                "currency": currency,
                "charge_id": result.operation_id,
                "items": items,
            },
        )
    else:
        payment.status, payment.decline_code = Payment.Status.DECLINED, result.decline_code
        payment.save()
        publish(
            event_type="payments.payment.failed",
            aggregate_type="payment",
            aggregate_id=str(order_id),
            payload={"order_id": str(order_id), "reason": "payment_declined", "decline_code": result.decline_code},
        )


@transaction.atomic(savepoint=False)
def payment_refund(*, order_id: uuid.UUID, reason: str) -> None:
    """Refund the order's charge if there is one and it is not refunded yet.

    Before any charge is known, the gateway is asked (a charge whose handler crashed before
    its commit exists only there); if it has none, a tombstone stops any later charge.
    """
    payment = _lock_payment(order_id)
    if payment.status == Payment.Status.NEW:
        with gateway_call():
            charge = gateway.find(charge_key(order_id))
        if charge is None or not charge.succeeded:
            payment.status = Payment.Status.VOIDED
            payment.save()
            logger.info("order ended before any charge: tombstone left")
            return
        payment.status, payment.charge_id = Payment.Status.CHARGED, charge.operation_id
        payment.amount, payment.currency = charge.amount, charge.currency
    if payment.status != Payment.Status.CHARGED:
        logger.info("refund ignored: payment is %s", payment.status)
        return
    with gateway_call():
        result = gateway.refund(
            idempotency_key=refund_key(order_id),
            charge_key=charge_key(order_id),
            charge_id=payment.charge_id,
            amount=payment.amount,
        )
    payment.status, payment.refund_id = Payment.Status.REFUNDED, result.operation_id
    payment.save()
    publish(
        event_type="payments.payment.refunded",
        aggregate_type="payment",
        aggregate_id=str(order_id),
        payload={
            "order_id": str(order_id),
            "amount": f"{payment.amount:.2f}",
            "currency": payment.currency,
            "refund_id": result.operation_id,
            "reason": reason,
        },
    )
