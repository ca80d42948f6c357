"""The gateway worker (``manage.py run_gateway_calls``, the Procfile's ``gateway-calls``): makes
payments' gateway calls outside any database transaction, many at once.

The payments handlers record each operation in flight (``charging``, ``refunding``) inside their
batch's transaction. This loop, on one database connection, claims the due ones under a lease
and commits; a pool of ``GATEWAY_CONCURRENCY`` threads makes the HTTP calls (they never touch the
database, so the process holds one connection whatever the concurrency, and on PostgreSQL a
second that only listens for calls recorded due: payments/wakeup.py); the loop then records
each outcome and its event in a short transaction of its own. A slow or hung call holds one
thread for at most ``GATEWAY_TIMEOUT``, never a lock, a batch or SQLite's write lock.

After a crash anywhere (between the record in flight, the call and the outcome's commit) the
lease runs out and the operation is claimed again; a claim after the first asks the gateway by
the operation's key before anything else, so a charge made before the crash is recorded, never
made twice. A failure that may pass (timeout, unavailable) is tried again after a backoff; a
charge still unanswered after ``GATEWAY_CHARGE_ATTEMPTS`` is given up (declined,
``processing_error``) once the gateway confirms it holds nothing under its key. A refund is
never given up: the money is owed.
"""

import logging
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from decimal import Decimal

from django.db import DatabaseError, connections, transaction
from reliable_messaging.api import DATABASE_BACKOFF_MAX, Backoff, collecting, fault_point, write_collected

from payments import services
from payments.conf import setting
from payments.gateway import (
    GatewayError,
    GatewayResult,
    GatewayUnavailable,
    OutcomeUnknown,
    RefundFailed,
    UnbelievableAnswer,
)
from payments.gateway_client import gateway
from payments.models import Payment
from payments.wakeup import DueCallListener

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.1
# Answers arriving within this long of each other are recorded in one transaction (one commit,
# not one per call), at the cost of that much latency per call.
GATHER_SECONDS = 0.02
MAX_BACKOFF = 30.0


@dataclass(frozen=True)
class Call:
    """What one call needs, read from its row: the threads never touch the database."""

    order_id: uuid.UUID
    kind: str  # Payment.Status.CHARGING or REFUNDING
    attempt: int
    amount: Decimal | None
    currency: str
    token: str
    charge_id: str


@dataclass(frozen=True)
class Answer:
    call: Call
    result: GatewayResult | None = None  # the charge's or refund's; None: nothing to refund
    charge: GatewayResult | None = None  # for a refund: the charge it refunds
    retry_in: float | None = None  # a failure that may pass
    given_up: bool = False  # a charge the gateway never answered and has no record of
    error: str = ""  # why it is tried again


def lease_seconds() -> float:
    """Longer than any one call can take: GATEWAY_TIMEOUT bounds a whole call."""
    return setting("GATEWAY_TIMEOUT") + 5


def backoff(attempt: int) -> float:
    return min(MAX_BACKOFF, 0.5 * 2 ** (attempt - 1))


def charge(call: Call) -> Answer:
    key = services.charge_key(call.order_id)
    expected = {"order_id": str(call.order_id), "amount": call.amount, "currency": call.currency}
    if call.attempt > 1 and (found := gateway.find(key, kind="charge", **expected)) is not None:  # ask first
        return Answer(call, found)
    if call.attempt > setting("GATEWAY_CHARGE_ATTEMPTS"):  # and the gateway has nothing under the key
        return Answer(call, given_up=True)
    return Answer(call, gateway.charge(idempotency_key=key, token=call.token, **expected))


def refund(call: Call) -> Answer:
    """The refund of the order's charge (None: there was none to refund); recorded only once the gateway
    says it succeeded."""
    order_id = str(call.order_id)
    charged = gateway.find(
        services.charge_key(call.order_id), kind="charge", order_id=order_id, amount=call.amount, currency=call.currency
    )
    if call.charge_id and (charged is None or charged.operation_id != call.charge_id):
        raise UnbelievableAnswer(f"the gateway does not show the charge {call.charge_id} it made")
    if charged is None or not charged.succeeded:  # refunded before any charge was recorded, and there was none
        return Answer(call, None)
    key = services.refund_key(call.order_id)
    expected = {"order_id": order_id, "amount": charged.amount, "currency": charged.currency}
    made = gateway.find(key, kind="refund", **expected) if call.attempt > 1 else None
    if made is None:
        made = gateway.refund(
            idempotency_key=key,
            charge_key=services.charge_key(call.order_id),
            charge_id=charged.operation_id,
            **expected,
        )
    if not made.succeeded:
        raise RefundFailed(f"the gateway answered the refund {key} {made.decline_code or 'failed'}")
    return Answer(call, made, charged)


def make_call(call: Call) -> Answer:
    """One call, outside any transaction; in a pool thread. Whatever the gateway answers, the worker
    goes on: a failure is retried later, and says why on the payment (``call_error``)."""
    fault_point("gateway_calls.before_call")
    try:
        answer = charge(call) if call.kind == Payment.Status.CHARGING else refund(call)
    except (OutcomeUnknown, GatewayUnavailable) as exc:
        delay = max(backoff(call.attempt), getattr(exc, "retry_after", None) or 0)
        logger.warning("gateway call for order %s failed, again in %.1fs: %s", call.order_id, delay, exc)
        return Answer(call, retry_in=delay, error=str(exc))
    except GatewayError as exc:
        logger.error("gateway call for order %s refused, again in %.0fs: %s", call.order_id, MAX_BACKOFF, exc)
        return Answer(call, retry_in=MAX_BACKOFF, error=str(exc))
    except Exception as exc:  # a defect of ours, or an answer no check foresaw: the others' calls go on
        logger.exception("gateway call for order %s broke, again in %.0fs", call.order_id, MAX_BACKOFF)
        return Answer(call, retry_in=MAX_BACKOFF, error=f"{type(exc).__name__}: {exc}")
    fault_point("gateway_calls.after_call")
    return answer


def record(answer: Answer) -> None:
    """An outcome other than a charge's answer, and its event (inside ``record_all``'s transaction)."""
    call = answer.call
    if answer.retry_in is not None:
        services.postpone_call(call.order_id, answer.retry_in, answer.error)
    elif answer.given_up:
        services.record_charge_given_up(call.order_id)
    else:
        services.record_refund_outcome(call.order_id, answer.charge, answer.result)


def is_charge_answer(answer: Answer) -> bool:
    return answer.retry_in is None and not answer.given_up and answer.call.kind == Payment.Status.CHARGING


def record_all(answers: list[Answer]) -> None:
    """The answers that came in together, in one short transaction: one commit, not one per call,
    the charges' answers recorded together and every event written with one insert. If it
    fails, their leases run out and each is asked about again by its key."""
    charges = [answer for answer in answers if is_charge_answer(answer)]
    try:
        with transaction.atomic(), collecting() as published:
            services.record_charge_outcomes([(answer.call.order_id, answer.result) for answer in charges])
            for answer in answers:
                if not is_charge_answer(answer):
                    record(answer)
            write_collected(published)
    except Exception:  # the database, or an outcome it refuses: their leases run out, each is asked about again
        logger.exception("the outcomes of %d gateway calls could not be recorded", len(answers))
        connections.close_all()
        return
    fault_point("gateway_calls.after_outcome")  # committed


def as_call(payment: Payment) -> Call:
    return Call(
        order_id=payment.order_id,
        kind=payment.status,
        attempt=payment.call_attempts,
        amount=payment.amount,
        currency=payment.currency,
        token=payment.token,
        charge_id=payment.charge_id,
    )


def run_due_calls(rounds: int = 10) -> int:
    """Make every call that is due, one after another in this thread, and record each: the worker's
    loop without its threads (``run_gateway_calls --once``; the in-process tests). A recorded
    charge whose order was cancelled meanwhile makes its refund due at once: another round."""
    made = 0
    for _ in range(rounds):
        answers = [make_call(as_call(payment)) for payment in services.claim_due_calls(1000, lease_seconds())]
        if not answers:
            break
        record_all(answers)
        made += len(answers)
    return made


def run(stop: threading.Event, concurrency: int | None = None) -> None:
    """Claim, call, record, until ``stop``; then finish the calls in the air (each bounded by
    GATEWAY_TIMEOUT) and record them. The loop sleeps until a call is answered, a new one is
    recorded due (payments.wakeup) or POLL_SECONDS pass (a retry's time, an expired lease)."""
    concurrency = concurrency or setting("GATEWAY_CONCURRENCY")
    in_air: set[Future] = set()
    wake = threading.Event()
    if DueCallListener.enabled():
        DueCallListener(wake, stop).start()
    outage = Backoff()  # the consumers' own: a database that does not answer is never hammered
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="gateway-call") as pool:
        while not stop.is_set() or in_air:
            wake.clear()  # before looking: whatever happens from here on wakes the wait below
            if not stop.is_set() and len(in_air) < concurrency:
                try:
                    claimed = services.claim_due_calls(concurrency - len(in_air), lease_seconds())
                    outage.reset()
                except DatabaseError as exc:  # the calls in the air go on; their outcomes wait for it
                    delay = min(outage.next_delay(), DATABASE_BACKOFF_MAX)
                    logger.warning("database unavailable, claiming again in %.1fs: %s", delay, exc)
                    connections.close_all()
                    stop.wait(delay)
                    claimed = []
                for payment in claimed:
                    future = pool.submit(make_call, as_call(payment))
                    future.add_done_callback(lambda _: wake.set())
                    in_air.add(future)
            done = {future for future in in_air if future.done()}
            if done and len(done) < len(in_air):  # the answers that follow within a moment share the transaction
                more, _ = wait(in_air - done, timeout=GATHER_SECONDS)
                done |= more
            if done:
                in_air -= done
                record_all([future.result() for future in done])
            else:
                wake.wait(POLL_SECONDS)
