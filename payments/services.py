"""Payments' writes: charge an order once, refund it at most once, and never inside a transaction
that waits on the network.

The handlers only record the operation in flight (``charging``, ``refunding``) and commit with
their batch; the gateway worker (payments/gateway_calls.py) makes the call outside any
transaction, under an idempotency key derived from the order, and records the outcome with its
event (``record_*`` below). After a crash the worker asks the gateway by that key first.
"""

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from reliable_messaging.api import TransientError, Turn, caused_by, current_cause, publish, publish_again

from kernel.bulk import bulk_save
from payments.models import CALL_ERROR_LENGTH, Payment
from payments.wakeup import notify_call_due

logger = logging.getLogger(__name__)

# What a charge the gateway never answered becomes once the worker gives up on it (Stripe's code
# for a charge the processor could not make): the order fails as a declined payment would.
GAVE_UP_DECLINE_CODE = "processing_error"


@dataclass(frozen=True)
class ChargeRequest:
    order_id: uuid.UUID
    amount: Decimal
    currency: str
    token: str
    items: list


def charge_key(order_id: uuid.UUID) -> str:
    return f"charge-{order_id}"


def refund_key(order_id: uuid.UUID) -> str:
    return f"refund-{order_id}"


def _lock_payment(order_id: uuid.UUID) -> Payment:
    """Lock this order's record, creating it first: all handlers of one order take turns."""
    Payment.objects.bulk_create([Payment(order_id=order_id)], ignore_conflicts=True)
    return Payment.objects.select_for_update().get(order_id=order_id)


def _lock_payments(order_ids: list[uuid.UUID]) -> dict[uuid.UUID, Payment]:
    """These orders' records, locked in order-id order, each created first if missing."""
    Payment.objects.bulk_create([Payment(order_id=order_id) for order_id in order_ids], ignore_conflicts=True)
    return {
        p.order_id: p for p in Payment.objects.select_for_update().filter(order_id__in=order_ids).order_by("order_id")
    }


@transaction.atomic(savepoint=False)
def payment_charge(requests: list[ChargeRequest], *, turn: Turn) -> None:
    """Record each order's charge in flight, due now, for the gateway worker (a second request
    changes nothing), in turn (``turn(n)``: where the n-th one's work is done), as if one after
    another, with every record locked and written once for all: a few statements for the lot
    instead of four per order. The records are locked in order-id order."""
    order_ids = sorted({r.order_id for r in requests})
    payments = _lock_payments(order_ids)
    charging: dict[uuid.UUID, Payment] = {}
    for n, r in enumerate(requests):
        with turn(n):
            payment = payments[r.order_id]
            if _charge(payment, amount=r.amount, currency=r.currency, token=r.token, items=r.items):
                charging[r.order_id] = payment
    if not charging:
        return
    fields = ["status", "amount", "currency", "token", "items", "call_due_at", "causes", "updated_at"]
    bulk_save(charging.values(), fields)
    notify_call_due()


def _charge(payment: Payment, *, amount: Decimal, currency: str, token: str, items: list) -> bool:
    """The charge recorded in flight on a locked record, due now; the caller writes it. False if
    the record was past ``new`` (a second request changes nothing)."""
    if payment.status != Payment.Status.NEW:
        logger.info("charge ignored: payment is already %s", payment.status)
        return False
    payment.status, payment.amount, payment.currency = Payment.Status.CHARGING, amount, currency
    payment.token, payment.items, payment.call_due_at = token, items, timezone.now()
    payment.causes = {**payment.causes, "charge": current_cause()}
    return True


@transaction.atomic(savepoint=False)
def payment_token_keep(tokens: list[tuple[uuid.UUID, str]], *, turn: Turn) -> None:
    """Each orchestrated order's card token, from its ``orders.order.created`` (encrypted for
    payments alone), kept on its record until the orchestrator's charge command, in turn
    (``turn(n)``: where the n-th one's work is done): the orchestrator never holds it. A record
    past ``new`` (voided, or charged with a v1 command's own token) needs none, nor one that has
    it. The records locked and written once for all; publishes nothing."""
    order_ids = sorted({order_id for order_id, _ in tokens})
    payments = _lock_payments(order_ids)
    kept = {}
    for n, (order_id, token) in enumerate(tokens):
        with turn(n):
            payment = payments[order_id]
            if payment.status == Payment.Status.NEW and not payment.token:
                payment.token = token
                kept[order_id] = payment
    bulk_save(kept.values(), ["token", "updated_at"])


@transaction.atomic(savepoint=False)
def payment_charge_ordered(requests: list[ChargeRequest], *, turn: Turn) -> None:
    """The orchestrator's charge commands, in turn (``turn(n)``: where the n-th one's work is
    done), each with the token kept from the order's creation (a request's own ``token``: a v1
    command's, sent by an orchestrator not yet upgraded): ``payment_charge`` of each order not
    charged yet. One ahead of the order's creation here is retried; one sent again (its deadline
    passed) changes nothing and repeats the outcome already announced, as it was
    (``publish_again``)."""
    order_ids = sorted({r.order_id for r in requests})
    payments = _lock_payments(order_ids)
    new: dict[int, ChargeRequest] = {}
    for n, r in enumerate(requests):
        payment = payments[r.order_id]
        if payment.status == Payment.Status.NEW:
            if not (token := r.token or payment.token):
                raise TransientError("orchestrator.payment.charge before the order's payment token came here: later")
            new[n] = replace(r, token=token)
    firsts = list(new)
    payment_charge(list(new.values()), turn=lambda m: turn(firsts[m]))
    for n, r in enumerate(requests):
        if n in new:
            continue
        with turn(n):
            payment = payments[r.order_id]
            if payment.charge_id:  # charged, and maybe refunded since
                publish_again(event_type="payments.payment.succeeded", correlation_id=str(r.order_id))
            elif payment.status == Payment.Status.DECLINED:
                publish_again(event_type="payments.payment.failed", correlation_id=str(r.order_id))
            else:
                logger.info("charge command: payment is %s, no outcome to repeat", payment.status)


@transaction.atomic(savepoint=False)
def payment_refund_ordered(*, order_id: uuid.UUID, reason: str) -> None:
    """The orchestrator's refund command: as ``payment_refund``; sent again once refunded, it
    repeats the refund's event."""
    payment = _lock_payment(order_id)
    if payment.status == Payment.Status.REFUNDED:
        publish_again(event_type="payments.payment.refunded", correlation_id=str(order_id))
    else:
        _refund(payment, reason)


def _record_charge(payment: Payment, result) -> None:
    """The charge's answer on a locked record, and its event; the caller writes the record."""
    if result.succeeded:
        payment.status, payment.charge_id = Payment.Status.CHARGED, result.operation_id
        _publish_succeeded(payment, result.operation_id)
    else:
        _record_decline(payment, result.decline_code)


def _publish_succeeded(payment: Payment, charge_id: str) -> None:
    publish(
        event_type="payments.payment.succeeded",
        aggregate_type="payment",
        aggregate_id=str(payment.order_id),
        payload={
            "order_id": str(payment.order_id),
            "amount": f"{payment.amount:.2f}",
            "currency": payment.currency,
            "charge_id": charge_id,
            "items": payment.items,
        },
    )


def _record_decline(payment: Payment, decline_code: str) -> None:
    """The decline on a locked record, and its event; the caller writes the record."""
    payment.status, payment.decline_code = Payment.Status.DECLINED, decline_code
    _publish_failed(payment)


def _publish_failed(payment: Payment) -> None:
    publish(
        event_type="payments.payment.failed",
        aggregate_type="payment",
        aggregate_id=str(payment.order_id),
        payload={"order_id": str(payment.order_id), "reason": "payment_declined", "decline_code": payment.decline_code},
    )


@transaction.atomic(savepoint=False)
def payment_refund(*, order_id: uuid.UUID, reason: str) -> None:
    """Leave the refund in flight for the gateway worker. A payment still ``new`` may hide a charge
    an older release made before crashing: the worker asks the gateway by key first and voids it
    if there is none (a tombstone: no later charge); one still ``charging`` is refunded once charged."""
    _refund(_lock_payment(order_id), reason)


@transaction.atomic(savepoint=False)
def payment_refund_returned(*, order_id: uuid.UUID, amount: Decimal, currency: str) -> None:
    """The return saga's refund: the captured charge refunded through the gateway worker, which
    answers ``payments.payment.refunded``. Refused at once (``payments.refund.refused``) unless
    payments holds that very charge: nothing else may be paid back."""
    payment = _lock_payment(order_id)
    if payment.status != Payment.Status.CHARGED:
        _publish_refund_refused(order_id, f"the payment is {payment.status}")
    elif (payment.amount, payment.currency) != (amount, currency):
        _publish_refund_refused(order_id, f"the charge is {payment.amount} {payment.currency}")
    else:
        _refund(payment, "returned")


def _publish_refund_refused(order_id: uuid.UUID, reason: str) -> None:
    publish(
        event_type="payments.refund.refused",
        aggregate_type="payment",
        aggregate_id=str(order_id),
        payload={"order_id": str(order_id), "reason": reason},
    )


def _refund(payment: Payment, reason: str) -> None:
    if payment.status in (Payment.Status.NEW, Payment.Status.CHARGED):
        payment.status, payment.refund_reason = Payment.Status.REFUNDING, reason
        payment.token = ""  # a token kept for a charge that will not come
        payment.call_due_at, payment.call_attempts = timezone.now(), 0
        payment.causes = {**payment.causes, "refund": current_cause()}
        payment.save()
        notify_call_due()
    elif payment.status == Payment.Status.CHARGING and not payment.refund_reason:
        payment.refund_reason = reason
        payment.causes = {**payment.causes, "refund": current_cause()}
        payment.save(update_fields=["refund_reason", "causes", "updated_at"])
    else:
        logger.info("refund ignored: payment is %s", payment.status)


def _record_refund(payment: Payment, result, reason: str) -> None:
    payment.status, payment.refund_id = Payment.Status.REFUNDED, result.operation_id
    payment.save()
    _publish_refunded(payment, result.operation_id, reason)


def _publish_refunded(payment: Payment, refund_id: str, reason: str) -> None:
    order_id = payment.order_id
    publish(
        event_type="payments.payment.refunded",
        aggregate_type="payment",
        aggregate_id=str(order_id),
        payload={
            "order_id": str(order_id),
            "amount": f"{payment.amount:.2f}",
            "currency": payment.currency,
            "refund_id": refund_id,
            "reason": reason,
        },
    )


# --- the gateway worker's short transactions ------------------------------------------------------
def _due(now):
    return Payment.objects.filter(
        status__in=[Payment.Status.CHARGING, Payment.Status.REFUNDING], call_due_at__lte=now
    ).order_by("call_due_at", "created_at")  # the oldest first, ties in arrival order


def claim_due_calls(limit: int, lease_seconds: float) -> list[Payment]:
    """Take up to ``limit`` operations in flight whose time has come and lease them: another worker
    takes one again only once its lease has run out (its worker died mid-call). A read first: an
    idle worker never opens a write transaction (on SQLite, the database's one write lock)."""
    if not _due(timezone.now()).exists():
        return []
    return _claim(limit, lease_seconds)


@transaction.atomic(savepoint=False)
def _claim(limit: int, lease_seconds: float) -> list[Payment]:
    now = timezone.now()
    claimed = list(_due(now).select_for_update(skip_locked=True)[:limit])
    lease_until = now + timedelta(seconds=lease_seconds)
    Payment.objects.filter(pk__in=[p.pk for p in claimed]).update(  # one statement for the lot
        call_attempts=F("call_attempts") + 1, call_due_at=lease_until, updated_at=now
    )
    for payment in claimed:
        payment.call_attempts, payment.call_due_at = payment.call_attempts + 1, lease_until
    return claimed


@transaction.atomic(savepoint=False)
def record_charge_outcomes(outcomes: list[tuple[uuid.UUID, object]]) -> None:
    """Each charge's answer (order id, result) and its event, unless another worker recorded it
    first: the records locked (in order-id order) and written once for all."""
    order_ids = sorted({order_id for order_id, _ in outcomes})
    payments = {
        p.order_id: p for p in Payment.objects.select_for_update().filter(order_id__in=order_ids).order_by("order_id")
    }
    recorded: dict[uuid.UUID, Payment] = {}
    for order_id, result in outcomes:
        payment = payments[order_id]
        if payment.status != Payment.Status.CHARGING:
            continue
        payment.token, payment.call_error = "", ""  # kept only while the call needed them
        with caused_by(payment.causes.get("charge", {})):
            _record_charge(payment, result)
        if payment.status == Payment.Status.CHARGED and payment.refund_reason:  # cancelled meanwhile
            payment.status, payment.call_due_at, payment.call_attempts = Payment.Status.REFUNDING, timezone.now(), 0
        recorded[order_id] = payment
    fields = [
        "status",
        "charge_id",
        "decline_code",
        "token",
        "call_due_at",
        "call_attempts",
        "call_error",
        "updated_at",
    ]
    bulk_save(recorded.values(), fields)


@transaction.atomic(savepoint=False)
def record_charge_given_up(order_id: uuid.UUID) -> None:
    """A charge the gateway never answered, and that it has no record of: the order fails."""
    payment = Payment.objects.select_for_update().get(order_id=order_id)
    if payment.status != Payment.Status.CHARGING:
        return
    logger.warning(
        "charge for order %s given up after %d attempts: the gateway holds nothing under its key; declined (%s)",
        order_id,
        payment.call_attempts - 1,
        GAVE_UP_DECLINE_CODE,
    )
    payment.token, payment.call_error = "", ""
    with caused_by(payment.causes.get("charge", {})):
        _record_decline(payment, GAVE_UP_DECLINE_CODE)  # terminal: a refund asked for later finds nothing
    payment.save()


@transaction.atomic(savepoint=False)
def record_refund_outcome(order_id: uuid.UUID, charge, result) -> None:
    """The refund's answer and its event; ``result`` None: there was no charge to refund (voided)."""
    payment = Payment.objects.select_for_update().get(order_id=order_id)
    if payment.status != Payment.Status.REFUNDING:
        return
    payment.call_error = ""
    if result is None:
        payment.status = Payment.Status.VOIDED
        payment.save(update_fields=["status", "call_error", "updated_at"])
        return
    payment.charge_id, payment.amount, payment.currency = charge.operation_id, charge.amount, charge.currency
    with caused_by(payment.causes.get("refund", {})):
        _record_refund(payment, result, payment.refund_reason)


def postpone_call(order_id: uuid.UUID, seconds: float, error: str) -> None:
    """A call that failed for now (a timeout, an unavailable gateway, an answer not believed): try it
    again later, and say why where an operator looks."""
    Payment.objects.filter(order_id=order_id).update(
        call_due_at=timezone.now() + timedelta(seconds=seconds), call_error=error[:CALL_ERROR_LENGTH]
    )
