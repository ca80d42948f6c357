from decimal import Decimal

from django.db import IntegrityError, transaction

from orders.models import StorefrontProduct


def storefront_product_apply(*, sku: str, name: str, price: Decimal, available: int, version: int) -> bool:
    """Apply a catalogue update unless a newer one is already applied; True if applied.

    Updates can arrive out of order (relays, retries, replays): the version decides.
    """
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


def storefront_products_apply(updates: list[dict]) -> int:
    """Apply a run of catalogue updates (each as ``storefront_product_apply`` takes it); the
    number of SKUs changed. Per SKU only the newest version is applied: what applying them one
    after another leaves, since a version is applied only over an older one. SKUs in order, so
    two runs that share SKUs take their rows in the same order."""
    newest: dict[str, dict] = {}
    for update in updates:
        if update["sku"] not in newest or update["version"] > newest[update["sku"]]["version"]:
            newest[update["sku"]] = update
    return sum(storefront_product_apply(**newest[sku]) for sku in sorted(newest))
