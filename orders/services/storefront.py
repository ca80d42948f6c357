from decimal import Decimal

from django.db import IntegrityError, transaction

from orders.models import StorefrontProduct


def storefront_products_apply(updates: list[dict]) -> int:
    """Apply a run of catalogue updates (``sku``, ``name``, ``price``, ``available``,
    ``version``), each unless a newer one is already applied; the number of SKUs changed.

    Updates can arrive out of order (relays, retries, replays): the version decides. Per SKU
    only the newest version of the run is applied: what applying them one after another leaves,
    since a version is applied only over an older one. SKUs in order, so two runs that share
    SKUs take their rows in the same order."""
    newest: dict[str, dict] = {}
    for update in updates:
        if update["sku"] not in newest or update["version"] > newest[update["sku"]]["version"]:
            newest[update["sku"]] = update
    return sum(_apply(**newest[sku]) for sku in sorted(newest))


def _apply(*, sku: str, name: str, price: Decimal, available: int, version: int) -> bool:
    """One SKU's newest update of the run, unless a newer one is applied already; True if applied."""
    fields = {"name": name, "price": price, "available": available, "version": version}
    with transaction.atomic():
        if StorefrontProduct.objects.filter(sku=sku, version__lt=version).update(**fields):
            return True
        if StorefrontProduct.objects.filter(sku=sku).exists():
            return False
        try:
            with transaction.atomic():
                StorefrontProduct.objects.create(sku=sku, **fields)
        except IntegrityError:  # created meanwhile by a concurrent update: let versions decide
            return bool(StorefrontProduct.objects.filter(sku=sku, version__lt=version).update(**fields))
        return True
