"""Payments' invariants (kernel/invariants.py): the money the gateway's own ledger moved follows
each order's outcome, and payments' record agrees with it. The ledger is the gateway's, asked through
payments' client of it (``GET /v1/ledger``; in process, the stand-in's own)."""

from collections import defaultdict
from decimal import Decimal

from kernel.invariants import SagaFacts
from payments.gateway_client import gateway
from payments.models import Payment

TERMINAL = {"CONFIRMED", "FAILED", "CANCELLED", "RETURNED"}
ONCE_PER_ORDER = ("payments.payment.succeeded", "payments.payment.failed", "payments.payment.refunded")


def in_progress() -> dict[str, int]:
    """The gateway worker's work: a charge or refund recorded in flight, its outcome not yet."""
    in_flight = Payment.objects.filter(status__in=[Payment.Status.CHARGING, Payment.Status.REFUNDING])
    return {"calls_in_flight": in_flight.count()}


def check(report, facts: SagaFacts) -> None:
    orders = facts.outcomes
    moved: dict[str, list[tuple[str, Decimal]]] = defaultdict(list)
    for op in gateway.ledger() if facts.whole else (op for oid in orders for op in gateway.ledger(order_id=oid)):
        moved[op.order_id].append((op.kind, op.amount))
    payments = {str(p.order_id): p for p in Payment.objects.filter(order_id__in=list(orders))}
    problems, charged, refunded = [], 0, 0
    for oid, order in orders.items():
        ops = moved.get(oid, [])
        charged += sum(1 for kind, _ in ops if kind == "charge")
        refunded += sum(1 for kind, _ in ops if kind == "refund")
        if order.status == "CONFIRMED":
            if ops != [("charge", order.total)]:
                problems.append(f"CONFIRMED order {oid} (total {order.total}) moved {ops}")
        elif order.status == "RETURNED":
            if ops != [("charge", order.total), ("refund", order.total)]:
                problems.append(f"RETURNED order {oid} (total {order.total}) moved {ops}")
        elif order.status in TERMINAL and ops not in ([], [("charge", order.total), ("refund", order.total)]):
            problems.append(f"{order.status} order {oid} (total {order.total}) moved {ops}")
        payment = payments.get(oid)
        status = payment.status if payment else None
        agrees = {
            (): {None, Payment.Status.DECLINED, Payment.Status.VOIDED},
            ("charge",): {Payment.Status.CHARGED},
            ("charge", "refund"): {Payment.Status.REFUNDED},
        }.get(tuple(kind for kind, _ in ops), set())
        if order.status in TERMINAL and status not in agrees:
            problems.append(f"payments records {status} for order {oid}, the gateway moved {ops}")
    if facts.whole:
        strangers = sorted(set(moved) - set(orders))
        problems += [f"money moved for {oid}, which is no order: {moved[oid]}" for oid in strangers]
    report.check(
        "money by the gateway ledger (CONFIRMED: one charge; RETURNED: charge + equal refund; "
        "FAILED/CANCELLED: none or charge + equal refund)",
        problems,
        f"{charged} charges, {refunded} refunds",
    )
