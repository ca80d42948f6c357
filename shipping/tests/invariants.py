"""Shipping's invariants (kernel/invariants.py): the shipments follow the orders' outcomes
(tests/support/split.py checks a split with ``shipment_problems``)."""

from collections import Counter

from kernel.invariants import SagaFacts
from shipping.models import Shipment

ONCE_PER_ORDER = (
    "shipping.shipment.created",
    "shipping.shipment.dispatched",
    "shipping.shipment.cancelled",
    "shipping.shipment.return_requested",
)


def shipment_problems(
    order_statuses: dict[str, str], shipments: dict[str, str], *, whole: bool, orchestrated: frozenset = frozenset()
) -> list[str]:
    """Shipping against the orders' outcomes (``order id -> status`` each): a CONFIRMED order has
    exactly one shipment (one per order is the table's unique key), a CANCELLED order's, if it has
    one, is CANCELLED or RETURN_REQUESTED, a RETURNED order's is one of those two, a FAILED order
    has none, unless it was ``orchestrated`` (shipping is asked before the confirmation): then one
    REFUSED or CANCELLED. ``whole``: also no shipment of an order that does not exist."""
    problems = []
    for oid, status in sorted(order_statuses.items()):
        shipment = shipments.get(oid)
        if status == "CONFIRMED" and shipment is None:
            problems.append(f"CONFIRMED order {oid} has no shipment")
        elif status == "CANCELLED" and shipment not in (None, "CANCELLED", "RETURN_REQUESTED"):
            problems.append(f"CANCELLED order {oid} has a {shipment} shipment")
        elif status == "RETURNED" and shipment not in ("CANCELLED", "RETURN_REQUESTED"):
            problems.append(f"RETURNED order {oid} has a {shipment} shipment")
        elif status == "FAILED" and oid in orchestrated and shipment in (None, "REFUSED", "CANCELLED"):
            continue
        elif status in ("FAILED", "PENDING") and shipment is not None:
            problems.append(f"{status} order {oid} has a {shipment} shipment")
    if whole:
        problems += [f"shipment of {oid}, which is no order" for oid in sorted(set(shipments) - set(order_statuses))]
    return problems


def check(report, facts: SagaFacts) -> None:
    rows = Shipment.objects.all() if facts.whole else Shipment.objects.filter(order_id__in=list(facts.outcomes))
    shipments = {str(order_id): status for order_id, status in rows.values_list("order_id", "status")}
    problems = shipment_problems(facts.statuses, shipments, whole=facts.whole, orchestrated=facts.orchestrated)
    report.check(
        "shipments follow the outcomes (CONFIRMED: one; CANCELLED: none, CANCELLED or RETURN_REQUESTED; "
        "RETURNED: CANCELLED or RETURN_REQUESTED; "
        "FAILED: none, or if orchestrated REFUSED or CANCELLED)",
        problems,
        f"{len(shipments)} shipments: {dict(sorted(Counter(shipments.values()).items()))}",
    )
