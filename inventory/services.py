"""Inventory's writes. Every change to a product publishes ``inventory.product.updated``."""

import logging
import uuid
from decimal import Decimal

from django.db import transaction
from reliable_messaging.api import Turn, publish, publish_again

from inventory.events import Line
from inventory.models import Product, Reservation
from kernel.bulk import bulk_save

logger = logging.getLogger(__name__)


def _publish_product_updated(product: Product) -> None:
    publish(
        event_type="inventory.product.updated",
        aggregate_type="product",
        aggregate_id=product.sku,
        correlation_id=product.sku,
        payload={
            "sku": product.sku,
            "name": product.name,
            "price": f"{product.price:.2f}",
            "available": product.stock,
            "version": product.version,
        },
    )


@transaction.atomic(savepoint=False)
def product_upsert(*, sku: str, name: str, price: Decimal, stock: int) -> Product:
    """Create a product or change it; either way the storefront hears of it."""
    product = Product.objects.select_for_update().filter(sku=sku).first()
    if product is None:
        product = Product.objects.create(sku=sku, name=name, price=price, stock=stock)
    else:
        product.name, product.price, product.stock = name, price, stock
        product.version += 1
        product.save()
    _publish_product_updated(product)
    return product


@transaction.atomic(savepoint=False)
def product_create_if_missing(*, sku: str, name: str, price: Decimal, stock: int) -> bool:
    """Create a product unless it exists (a second seed changes nothing); True if created."""
    if Product.objects.filter(sku=sku).exists():
        return False
    product_upsert(sku=sku, name=name, price=price, stock=stock)
    return True


def _lock_reservation(order_id: uuid.UUID) -> Reservation:
    """Lock this order's record, creating it first: all handlers of one order take turns."""
    Reservation.objects.bulk_create([Reservation(order_id=order_id)], ignore_conflicts=True)
    return Reservation.objects.select_for_update().get(order_id=order_id)


@transaction.atomic(savepoint=False)
def stock_reserve_ordered(requests: list[tuple[uuid.UUID, list[Line]]], *, turn: Turn) -> None:
    """The orchestrator's reserve commands, in turn (``turn(n)``: where the n-th one's work is
    done): ``stock_reserve`` of each order not reserved yet; an order decided already (the
    command sent again, its deadline passed) changes nothing and repeats the outcome announced,
    as it was (``publish_again``)."""
    order_ids = sorted({order_id for order_id, _ in requests})
    Reservation.objects.bulk_create([Reservation(order_id=order_id) for order_id in order_ids], ignore_conflicts=True)
    statuses = dict(
        Reservation.objects.select_for_update()
        .filter(order_id__in=order_ids)
        .order_by("order_id")
        .values_list("order_id", "status")
    )
    new = [n for n, (order_id, _) in enumerate(requests) if statuses[order_id] == Reservation.Status.NEW]
    firsts = set(new)
    stock_reserve([requests[n] for n in new], turn=lambda m: turn(new[m]))
    repeated = {
        Reservation.Status.RESERVED: "inventory.stock.reserved",
        Reservation.Status.FAILED: "inventory.stock.reservation_failed",
    }
    for n, (order_id, _) in enumerate(requests):
        if n in firsts:
            continue
        with turn(n):
            if event_type := repeated.get(statuses[order_id]):
                publish_again(event_type=event_type, correlation_id=str(order_id))
            else:
                logger.info("reserve command ignored: reservation is %s", statuses[order_id])


@transaction.atomic(savepoint=False)
def stock_release_ordered(*, order_id: uuid.UUID, reason: str) -> None:
    """The orchestrator's release command: as ``stock_release``; once released (by an earlier
    command, or by the order's own end), it repeats the release's event."""
    reservation = _lock_reservation(order_id)
    if reservation.status == Reservation.Status.RELEASED:
        publish_again(event_type="inventory.stock.released", correlation_id=str(order_id))
    else:
        _release(reservation, reason)


@transaction.atomic(savepoint=False)
def stock_reserve(requests: list[tuple[uuid.UUID, list[Line]]], *, turn: Turn) -> None:
    """Reserve every line of each (order id, lines) or none, after a successful payment, in turn
    (``turn(n)``: where the n-th one's work is done), as if one after another, with every record
    and product locked and written once for all: a few statements for the lot instead of five
    per order. Locks the reservations, then the products by SKU, as inventory's other writes do,
    so none can deadlock another."""
    order_ids = sorted({order_id for order_id, _ in requests})
    Reservation.objects.bulk_create([Reservation(order_id=order_id) for order_id in order_ids], ignore_conflicts=True)
    reservations = {
        r.order_id: r
        for r in Reservation.objects.select_for_update().filter(order_id__in=order_ids).order_by("order_id")
    }
    skus = {
        line.sku
        for order_id, lines in requests
        if reservations[order_id].status == Reservation.Status.NEW
        for line in lines
    }
    products = _lock_products(skus)
    changed_products: dict[str, Product] = {}
    changed_reservations: dict[uuid.UUID, Reservation] = {}
    for n, (order_id, lines) in enumerate(requests):
        with turn(n):
            reservation = reservations[order_id]
            if _reserve(reservation, lines, products):
                changed_reservations[order_id] = reservation
                if reservation.status == Reservation.Status.RESERVED:
                    changed_products.update((line.sku, products[line.sku]) for line in lines)
    bulk_save(changed_products.values(), ["stock", "version", "updated_at"])
    bulk_save(changed_reservations.values(), ["status", "reason", "lines", "updated_at"])


def _lock_products(skus) -> dict[str, Product]:
    # Rows locked in SKU order, so two reservations can neither deadlock nor oversell.
    return {p.sku: p for p in Product.objects.select_for_update().filter(sku__in=skus).order_by("sku")}


def _reserve(reservation: Reservation, lines: list[Line], products: dict[str, Product]) -> bool:
    """Decide a reservation on rows already locked, publishing its outcome; the caller writes
    them. False if it was decided before (nothing changed)."""
    order_id = reservation.order_id
    if reservation.status != Reservation.Status.NEW:
        logger.info("reservation ignored: order is already %s", reservation.status)
        return False
    wanted = {line.sku: line.quantity for line in lines}
    unknown = sorted(set(wanted) - set(products))
    short = sorted(sku for sku, quantity in wanted.items() if sku in products and products[sku].stock < quantity)
    if unknown or short:
        reservation.status = Reservation.Status.FAILED
        reservation.reason = "out_of_stock"
        _publish_reservation_failed(order_id, skus=short, unknown=unknown)
        return True
    for sku in sorted(wanted):
        product = products[sku]
        product.stock -= wanted[sku]
        product.version += 1
    reservation.status = Reservation.Status.RESERVED
    reservation.lines = [{"sku": sku, "quantity": wanted[sku]} for sku in sorted(wanted)]
    _publish_reserved(reservation)
    for sku in sorted(wanted):
        _publish_product_updated(products[sku])
    return True


@transaction.atomic(savepoint=False)
def stock_release(*, order_id: uuid.UUID, reason: str) -> None:
    """Give back an order's reserved stock, once; before any reservation, leave a tombstone."""
    _release(_lock_reservation(order_id), reason)


def _release(reservation: Reservation, reason: str) -> None:
    if reservation.status == Reservation.Status.NEW:
        reservation.status = Reservation.Status.CANCELLED
        reservation.reason = reason
        reservation.save()
        logger.info("order ended before any reservation: tombstone left")
        return
    if reservation.status != Reservation.Status.RESERVED:
        logger.info("release ignored: reservation is %s", reservation.status)
        return
    lines = {line["sku"]: line["quantity"] for line in reservation.lines}
    products = list(Product.objects.select_for_update().filter(sku__in=lines).order_by("sku"))
    for product in products:
        product.stock += lines[product.sku]
        product.version += 1
        product.save(update_fields=["stock", "version", "updated_at"])
    reservation.status = Reservation.Status.RELEASED
    reservation.reason = reason
    reservation.save()
    _publish_released(reservation)
    for product in products:
        _publish_product_updated(product)


@transaction.atomic(savepoint=False)
def stock_restock_returned(*, order_id: uuid.UUID) -> None:
    """The return saga's restock: the order's reserved lines back in stock, once (reserved ->
    returned). A reservation in any other state is not answered: the step is given up and the
    return compensated."""
    reservation = _lock_reservation(order_id)
    if reservation.status != Reservation.Status.RESERVED:
        logger.info("restock ignored: reservation is %s", reservation.status)
        return
    moved = _move_stock(reservation.lines, +1)
    reservation.status = Reservation.Status.RETURNED
    reservation.save(update_fields=["status", "updated_at"])
    _publish_stock_moved(reservation, "inventory.stock.restocked", moved)


@transaction.atomic(savepoint=False)
def stock_take_back_returned(*, order_id: uuid.UUID) -> None:
    """The return saga's compensation of a restock: its units taken back out (returned ->
    reserved), as many as are still in stock (the others were sold meanwhile); answered with what
    was taken, nothing if there was no restock (an undo sent before or instead of it)."""
    reservation = _lock_reservation(order_id)
    moved: list[dict] = []
    if reservation.status == Reservation.Status.RETURNED:
        moved = _move_stock(reservation.lines, -1)
        reservation.status = Reservation.Status.RESERVED
        reservation.save(update_fields=["status", "updated_at"])
    _publish_stock_moved(reservation, "inventory.stock.taken_back", moved)


def _move_stock(lines: list[dict], sign: int) -> list[dict]:
    """Put ``lines`` back in stock (+1) or take them out (-1, never below zero); the lines moved."""
    wanted = {line["sku"]: line["quantity"] for line in lines}
    moved = []
    for product in Product.objects.select_for_update().filter(sku__in=wanted).order_by("sku"):
        quantity = wanted[product.sku] if sign > 0 else min(wanted[product.sku], product.stock)
        if quantity == 0:
            continue
        product.stock += sign * quantity
        product.version += 1
        product.save(update_fields=["stock", "version", "updated_at"])
        _publish_product_updated(product)
        moved.append({"sku": product.sku, "quantity": quantity})
    return moved


def _publish_stock_moved(reservation: Reservation, event_type: str, items: list[dict]) -> None:
    order_id = str(reservation.order_id)
    publish(
        event_type=event_type,
        aggregate_type="reservation",
        aggregate_id=order_id,
        payload={"order_id": order_id, "items": items},
    )


def _publish_reserved(reservation: Reservation) -> None:
    order_id = str(reservation.order_id)
    publish(
        event_type="inventory.stock.reserved",
        aggregate_type="reservation",
        aggregate_id=order_id,
        payload={"order_id": order_id, "items": reservation.lines},
    )


def _publish_reservation_failed(order_id: uuid.UUID, *, skus: list[str], unknown: list[str]) -> None:
    publish(
        event_type="inventory.stock.reservation_failed",
        aggregate_type="reservation",
        aggregate_id=str(order_id),
        payload={"order_id": str(order_id), "reason": "out_of_stock", "skus": skus, "unknown_skus": unknown},
    )


def _publish_released(reservation: Reservation) -> None:
    order_id = str(reservation.order_id)
    publish(
        event_type="inventory.stock.released",
        aggregate_type="reservation",
        aggregate_id=order_id,
        payload={"order_id": order_id, "items": reservation.lines, "reason": reservation.reason},
    )
