"""Orders' invariants (kernel/invariants.py): every order ends, an accepted cancellation stays,
and the storefront copy is in step with inventory's catalogue; the orders' outcomes every other
context's check reads."""

import uuid
from collections import Counter

from django.db.models import Sum

from kernel.invariants import OrderOutcome, SagaFacts
from orders.models import Order, OrderLine, StorefrontProduct

TERMINAL = {Order.Status.CONFIRMED, Order.Status.FAILED, Order.Status.CANCELLED, Order.Status.RETURNED}
ONCE_PER_ORDER = (
    "orders.order.created",
    "orders.order.confirmed",
    "orders.order.failed",
    "orders.order.cancelled",
    "orders.order.returned",
)


def saga_outcomes(order_ids=None) -> dict[str, OrderOutcome]:
    orders = Order.objects.prefetch_related("lines")
    if order_ids is not None:
        orders = orders.filter(pk__in=[uuid.UUID(str(i)) for i in order_ids])
    return {
        str(o.id): OrderOutcome(
            status=o.status,
            total=o.total,
            failure_reason=o.failure_reason or "",
            saga_style=o.saga_style,
            lines={line.sku: line.quantity for line in o.lines.all()},
        )
        for o in orders
    }


def in_progress() -> dict[str, int]:
    return {
        "pending_orders": Order.objects.filter(status=Order.Status.PENDING).count(),
        "returning_orders": Order.objects.filter(status=Order.Status.RETURNING).count(),
    }


def facts(facts: SagaFacts) -> dict:
    """Of every order (not only those under test): the units CONFIRMED orders hold of each SKU, and
    which orders those are."""
    skus = list(facts.initial_stock)
    confirmed = OrderLine.objects.filter(order__status=Order.Status.CONFIRMED, sku__in=skus)
    return {
        "held": dict(confirmed.values_list("sku").annotate(units=Sum("quantity"))),
        "confirmed": {str(i) for i in confirmed.values_list("order_id", flat=True)},
    }


def check(report, facts: SagaFacts) -> None:
    orders = facts.outcomes
    statuses = Counter(o.status for o in orders.values())
    reasons = Counter(o.failure_reason for o in orders.values() if o.failure_reason)
    pending = [f"order {oid} is {o.status}" for oid, o in orders.items() if o.status not in TERMINAL]
    summary = f"{len(orders)} orders ({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))})"
    if reasons:
        summary += f"; failed for {', '.join(f'{r} {n}' for r, n in sorted(reasons.items()))}"
    report.check("every order terminal", pending, summary)
    reverted = [
        f"order {oid} was cancelled (202) but is {orders[oid].status}"
        for oid in sorted(facts.cancelled)
        if oid in orders and orders[oid].status != Order.Status.CANCELLED
    ]
    report.check("an accepted cancellation stays", reverted, f"{len(facts.cancelled)} cancellations accepted")
    unreturned = [
        f"order {oid}'s return was accepted (202) but it is {orders[oid].status}"
        for oid in sorted(facts.returned)
        if oid in orders and orders[oid].status != Order.Status.RETURNED
    ]
    report.check("an accepted return ends RETURNED", unreturned, f"{len(facts.returned)} returns accepted")
    catalogue = facts.shared.get("inventory", {}).get("catalogue")
    if catalogue is not None:
        _check_storefront(report, catalogue)


def _check_storefront(report, catalogue: dict[str, tuple[int, int]]) -> None:
    """Inventory's stock and version of each SKU under test against orders' storefront copy."""
    storefront = {s.sku: s for s in StorefrontProduct.objects.filter(sku__in=list(catalogue))}
    problems = [
        f"{sku}: storefront shows {storefront[sku].available} (v{storefront[sku].version}), "
        f"inventory has {stock} (v{version})"
        if sku in storefront
        else f"{sku}: missing from the storefront"
        for sku, (stock, version) in sorted(catalogue.items())
        if sku not in storefront or (storefront[sku].available, storefront[sku].version) != (stock, version)
    ]
    report.check("storefront in step with inventory", problems, f"{len(catalogue)} products")
