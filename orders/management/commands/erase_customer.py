from django.core.management.base import BaseCommand, CommandError

from orders.services.erasure import CustomerNotErasable, customer_erase


class Command(BaseCommand):
    help = (
        "Erase a customer: delete their key (every copy of their id in messages, dead letters and the "
        "event log becomes unreadable) and blank their orders."
    )

    def add_arguments(self, parser):
        parser.add_argument("customer_id", help="the customer_id their orders were placed with")

    def handle(self, *args, customer_id, **options):
        try:
            orders, keys = customer_erase(customer_id)
        except CustomerNotErasable as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"customer erased: {orders} order(s) blanked, {keys} key(s) deleted")
