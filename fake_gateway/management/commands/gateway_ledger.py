import json

from django.core.management.base import BaseCommand

from fake_gateway.ledger import ensure_storage, money_moved


class Command(BaseCommand):
    help = "Print the money the fake payment gateway moved (charges and refunds) as JSON lines."

    def add_arguments(self, parser):
        parser.add_argument("--order", default=None, help="only this order id")

    def handle(self, *args, order=None, **options):
        ensure_storage()
        for op in money_moved(order_id=order):
            line = {
                "order_id": op.order_id,
                "kind": op.kind,
                "amount": f"{op.amount:.2f}",
                "currency": op.currency,
                "idempotency_key": op.idempotency_key,
                "at": op.created_at.isoformat(),
            }
            self.stdout.write(json.dumps(line))
