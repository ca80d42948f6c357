"""Orders' reads."""

import uuid

from django.db.models import QuerySet
from reliable_messaging.operator import TimelineEntry, timeline_for

from orders.models import Order, StorefrontProduct


def order_get(*, order_id: str | uuid.UUID) -> Order | None:
    try:
        order_uuid = uuid.UUID(str(order_id))
    except ValueError:
        return None
    return Order.objects.prefetch_related("lines").filter(pk=order_uuid).first()


def order_timeline(*, order: Order, detailed: bool = False) -> list[TimelineEntry]:
    return timeline_for(str(order.id), detailed=detailed)


def storefront_products() -> QuerySet[StorefrontProduct]:
    return StorefrontProduct.objects.order_by("sku")
