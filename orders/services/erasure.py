"""A customer's erasure (GDPR art. 17) by crypto-shredding: the bus deletes the customer's own
key, under which orders.order.created sealed their id in every message (outbox, broker, dead
letters, event log; orders/context.toml, ``[personal]``), and orders blanks its own rows. No other
context keeps a customer's data: payments, inventory, shipping and the orchestrator know an order
by its id only (docs/operations.md, "Erasing a customer")."""

from django.db import transaction
from reliable_messaging.api import erase_subject

from orders.models import CheckoutRequest, Order

# An order still running a saga would be refused by every consumer once its customer is erased.
IN_FLIGHT = (Order.Status.PENDING, Order.Status.RETURNING)


class CustomerNotErasable(Exception):
    """Nothing was changed: the customer is unknown, or has an order in flight."""


def customer_erase(customer_id: str) -> tuple[int, int]:
    """Erase ``customer_id``: its key deleted, its orders' customer id and country blanked, the
    stored answers of its checkouts too. Return (orders blanked, keys deleted);
    ``CustomerNotErasable`` (nothing changed) for an unknown customer or one with an order in flight."""
    with transaction.atomic():
        orders = list(Order.objects.select_for_update().filter(customer_id=customer_id).only("id", "status"))
        if busy := sorted(str(order.id) for order in orders if order.status in IN_FLIGHT):
            raise CustomerNotErasable(
                f"customer {customer_id!r} has {len(busy)} order(s) in flight ({', '.join(busy)}): erase once they end"
            )
        keys = erase_subject(customer_id)
        if not orders and not keys:
            raise CustomerNotErasable(f"no order and no key of customer {customer_id!r}: nothing to erase")
        ids = [order.id for order in orders]
        Order.objects.filter(id__in=ids).update(customer_id="", ship_to="")
        for request in CheckoutRequest.objects.select_for_update().filter(order_id__in=ids):
            request.response_body = {**request.response_body, "customer_id": "", "ship_to": None}
            request.save(update_fields=["response_body"])
    return len(orders), keys
