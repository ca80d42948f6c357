"""Orders' message handlers: thin readers of the payload over the services.
Each is subscribed by the context's declaration (context.toml, under ``consumes``)."""

from reliable_messaging.api import IncomingEvent, in_bulk, in_turn

from orders.events import (
    failure_reason_of,
    order_id_of,
    payment_of,
    product_update_of,
    refund_check,
    reserved_lines_of,
    step_deadline_of,
)
from orders.services.returns import return_reply, return_step_deadline
from orders.services.saga import (
    PAYMENT_SUCCEEDED,
    PaymentSucceeded,
    StockReserved,
    order_confirm,
    order_confirm_as_ordered,
    order_decline,
    order_fail_as_ordered,
    order_fail_out_of_stock,
    order_payment_record,
    order_replies_apply,
)
from orders.services.storefront import storefront_product_apply, storefront_products_apply


def on_payment_succeeded(event: IncomingEvent) -> None:
    order_payment_record(order_id=order_id_of(event), **payment_of(event))


def on_stock_reserved(event: IncomingEvent) -> None:
    order_confirm(order_id=order_id_of(event), reserved=reserved_lines_of(event))


@in_bulk(on_payment_succeeded, on_stock_reserved)
def on_payments_and_reservations(events: list[IncomingEvent]) -> None:
    replies = [
        PaymentSucceeded(order_id_of(event), **payment_of(event))
        if event.event_type == PAYMENT_SUCCEEDED
        else StockReserved(order_id_of(event), reserved_lines_of(event))
        for event in events
    ]
    order_replies_apply(replies, turn=lambda n: in_turn(events[n]))


def on_payment_failed(event: IncomingEvent) -> None:
    order_decline(order_id=order_id_of(event))


def on_reservation_failed(event: IncomingEvent) -> None:
    order_fail_out_of_stock(order_id=order_id_of(event))


def on_product_updated(event: IncomingEvent) -> None:
    storefront_product_apply(**product_update_of(event))


@in_bulk(on_product_updated)
def on_products_updated(events: list[IncomingEvent]) -> None:
    storefront_products_apply([product_update_of(event) for event in events])  # publishes nothing


def on_confirm_ordered(event: IncomingEvent) -> None:
    order_confirm_as_ordered(order_id=order_id_of(event))


def on_fail_ordered(event: IncomingEvent) -> None:
    order_fail_as_ordered(order_id=order_id_of(event), reason=failure_reason_of(event))


def on_return_reply(event: IncomingEvent) -> None:
    return_reply(order_id=order_id_of(event), event_type=event.event_type, check=refund_check(event))


def on_return_step_deadline(event: IncomingEvent) -> None:
    return_step_deadline(**step_deadline_of(event))
