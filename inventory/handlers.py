"""Inventory's message handlers: thin readers of the payload over the services."""

from inventory import services
from inventory.events import lines_of, order_id_of
from messaging.api import IncomingEvent, register_handler


def on_payment_succeeded(event: IncomingEvent) -> None:
    services.stock_reserve(order_id=order_id_of(event), lines=lines_of(event))


def on_order_cancelled(event: IncomingEvent) -> None:
    services.stock_release(order_id=order_id_of(event), reason="cancelled")


def on_order_failed(event: IncomingEvent) -> None:
    services.stock_release(order_id=order_id_of(event), reason=str(event.payload.get("reason") or "failed"))


def register() -> None:
    register_handler(consumer="inventory", event_type="payments.payment.succeeded", handler=on_payment_succeeded)
    register_handler(consumer="inventory", event_type="orders.order.cancelled", handler=on_order_cancelled)
    register_handler(consumer="inventory", event_type="orders.order.failed", handler=on_order_failed)
