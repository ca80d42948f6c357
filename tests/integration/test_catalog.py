"""The catalogue: inventory owns it, orders keeps a storefront copy from its events."""

from decimal import Decimal

import pytest
from django.core.management import call_command
from reliable_messaging.models import OutboxMessage

from inventory.models import Product
from orders.models import StorefrontProduct
from orders.services.storefront import storefront_products_apply

pytestmark = pytest.mark.django_db


def test_seed_catalog_creates_the_demo_products_once():
    call_command("seed_catalog")
    first = {p.sku: (p.stock, p.version) for p in Product.objects.all()}
    events = OutboxMessage.objects.filter(event_type="inventory.product.updated").count()
    Product.objects.filter(sku="WIDGET").update(stock=7)  # stock moved since, e.g. by sales

    call_command("seed_catalog")

    assert len(first) == 4 and events == 4
    assert min(stock for stock, _ in first.values()) <= 5  # one product is scarce
    assert Product.objects.get(sku="WIDGET").stock == 7
    assert OutboxMessage.objects.filter(event_type="inventory.product.updated").count() == 4


def test_every_product_event_carries_a_growing_version():
    call_command("seed_catalog")
    payloads = [row.payload for row in OutboxMessage.objects.filter(correlation_id="WIDGET")]
    assert payloads == [{"sku": "WIDGET", "name": "Widget", "price": "19.99", "available": 1000, "version": 1}]


def test_the_storefront_applies_only_newer_versions_whatever_the_arrival_order():
    def update(name: str, price: str, available: int, version: int) -> list[dict]:
        return [{"sku": "X", "name": name, "price": Decimal(price), "available": available, "version": version}]

    assert storefront_products_apply(update("X", "1.00", 5, 2)) == 1
    assert storefront_products_apply(update("X", "1.00", 9, 1)) == 0
    assert storefront_products_apply(update("X", "1.00", 9, 2)) == 0
    assert storefront_products_apply(update("X v3", "2.00", 4, 3)) == 1

    product = StorefrontProduct.objects.get(sku="X")
    assert (product.name, product.price, product.available, product.version) == ("X v3", Decimal("2.00"), 4, 3)
