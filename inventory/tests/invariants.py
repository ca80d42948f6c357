"""Inventory's invariants (kernel/invariants.py): stock is conserved, and held exactly for the
CONFIRMED orders; its catalogue, which orders' storefront copy must follow."""

from inventory.models import Product, Reservation
from kernel.invariants import SagaFacts

ONCE_PER_ORDER = (
    "inventory.stock.reserved",
    "inventory.stock.reservation_failed",
    "inventory.stock.released",
    "inventory.stock.restocked",  # a return's, once per order while no return is compensated
)


def facts(facts: SagaFacts) -> dict:
    products = Product.objects.filter(sku__in=list(facts.initial_stock))
    return {"catalogue": {p.sku: (p.stock, p.version) for p in products}}


def check(report, facts: SagaFacts) -> None:
    orders = facts.shared.get("orders", {"held": {}, "confirmed": set()})
    held, initial_stock = orders["held"], facts.initial_stock
    products = {p.sku: p for p in Product.objects.filter(sku__in=list(initial_stock))}
    problems = []
    for sku, initial in sorted(initial_stock.items()):
        available = products[sku].stock if sku in products else 0
        if available + held.get(sku, 0) != initial:
            problems.append(f"{sku}: initial {initial} != available {available} + held {held.get(sku, 0)}")
    summary = ", ".join(
        f"{sku} {initial} = {products[sku].stock} + {held.get(sku, 0)}"
        for sku, initial in sorted(initial_stock.items())
        if sku in products
    )
    report.check("stock conserved (initial = available + held by CONFIRMED)", problems, summary)

    reserved = {
        str(r.order_id)
        for r in Reservation.objects.filter(status=Reservation.Status.RESERVED)
        if any(line["sku"] in initial_stock for line in r.lines)
    }
    confirmed = orders["confirmed"]
    problems = [f"order {oid} is CONFIRMED without a reservation" for oid in sorted(confirmed - reserved)]
    problems += [f"order {oid} holds stock but is not CONFIRMED" for oid in sorted(reserved - confirmed)]
    report.check("stock reserved exactly for CONFIRMED orders", problems, f"{len(reserved)} reservations held")
