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
