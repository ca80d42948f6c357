"""Orders' message handlers: thin readers of the payload over the services.
Each is subscribed by the context's declaration (context.toml, under ``consumes``)."""

from contextlib import contextmanager

from messaging.api import IncomingEvent, InvalidPayload
from orders.events import order_id_of, product_update_of
from orders.models import Order
from orders.services.saga import OrderNotFound, order_confirm, order_fail
from orders.services.storefront import storefront_product_apply


@contextmanager
def about_a_known_order():
    """An event about an order this context never had can never be handled: a dead letter at once."""
    try:
        yield
    except OrderNotFound as exc:
        raise InvalidPayload(str(exc)) from None


def on_stock_reserved(event: IncomingEvent) -> None:
    with about_a_known_order():
        order_confirm(order_id=order_id_of(event))


def on_payment_failed(event: IncomingEvent) -> None:
    with about_a_known_order():
        order_fail(order_id=order_id_of(event), reason=Order.FailureReason.PAYMENT_DECLINED)


def on_reservation_failed(event: IncomingEvent) -> None:
    with about_a_known_order():
        order_fail(order_id=order_id_of(event), reason=Order.FailureReason.OUT_OF_STOCK)


def on_product_updated(event: IncomingEvent) -> None:
    storefront_product_apply(**product_update_of(event))
