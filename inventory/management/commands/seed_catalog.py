from decimal import Decimal

from django.core.management.base import BaseCommand

from inventory.services import product_create_if_missing

# (sku, name, price, stock); LIMITED-PRINT is scarce so the out-of-stock path is easy to see.
DEMO_CATALOG = [
    ("WIDGET", "Widget", Decimal("19.99"), 1000),
    ("GADGET", "Gadget", Decimal("49.50"), 500),
    ("GIZMO", "Gizmo", Decimal("5.00"), 10000),
    ("LIMITED-PRINT", "Limited edition print", Decimal("250.00"), 3),
]


class Command(BaseCommand):
    help = "Create the demo products with stock. Running it again changes nothing."

    def handle(self, *args, **options):
        for sku, name, price, stock in DEMO_CATALOG:
            created = product_create_if_missing(sku=sku, name=name, price=price, stock=stock)
            self.stdout.write(f"{sku}: {'created' if created else 'exists, unchanged'}")
