"""What inventory offers the fault tests (faultlib.steps): a product stocked, its stock read back.
Test code: inventory's production code never imports it."""

from decimal import Decimal

from inventory.models import Product
from inventory.services import product_upsert


def product_stocked(*, sku: str, name: str, price: Decimal, stock: int) -> None:
    product_upsert(sku=sku, name=name, price=price, stock=stock)


def stock(sku: str) -> int:
    return Product.objects.get(sku=sku).stock
