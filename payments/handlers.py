"""Payments' message handlers: thin readers of the payload over the services.
Each is subscribed by the context's declaration (context.toml, under ``consumes``)."""

from messaging.api import IncomingEvent
from payments import services
from payments.events import lines_of, order_id_of, text_of, total_of


def on_order_created(event: IncomingEvent) -> None:
    amount, currency = total_of(event)
    services.payment_charge(
        order_id=order_id_of(event),
        amount=amount,
        currency=currency,
        token=text_of(event, "payment_token"),
        items=lines_of(event),
    )


def on_reservation_failed(event: IncomingEvent) -> None:
    services.payment_refund(order_id=order_id_of(event), reason="out_of_stock")


def on_order_cancelled(event: IncomingEvent) -> None:
    services.payment_refund(order_id=order_id_of(event), reason="cancelled")


def on_order_failed(event: IncomingEvent) -> None:
    services.payment_refund(order_id=order_id_of(event), reason=str(event.payload.get("reason") or "failed"))
