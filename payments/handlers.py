"""Payments' message handlers: thin readers of the payload over the services.
Each is subscribed by the context's declaration (context.toml, under ``consumes``)."""

from reliable_messaging.api import IncomingEvent, in_runs, in_turn
from reliable_messaging.sagas import participant

from payments import services
from payments.events import amount_of, is_orchestrated, items_of, lines_of, order_id_of, text_of, total_of


@in_runs
def on_order_created(events: list[IncomingEvent]) -> None:
    kept = [event for event in events if is_orchestrated(event)]
    tokens = [(order_id_of(event), text_of(event, "payment_token")) for event in kept]
    services.payment_token_keep(tokens, turn=lambda n: in_turn(kept[n]))
    charged = [(event, _charge_request(event)) for event in events if not is_orchestrated(event)]
    services.payment_charge([request for _, request in charged], turn=lambda n: in_turn(charged[n][0]))


def _charge_request(event: IncomingEvent) -> services.ChargeRequest:
    amount, currency = total_of(event)
    return services.ChargeRequest(
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


@participant
@in_runs
def on_charge_ordered(events: list[IncomingEvent]) -> None:
    services.payment_charge_ordered([_ordered_charge(event) for event in events], turn=lambda n: in_turn(events[n]))


def _ordered_charge(event: IncomingEvent) -> services.ChargeRequest:
    amount, currency = amount_of(event)
    return services.ChargeRequest(
        order_id=order_id_of(event),
        amount=amount,
        currency=currency,
        token=event.payload.get("payment_token", ""),  # only in a v1 command (orchestrator/schemas/upcasters.py)
        items=items_of(event),
    )


@participant(undoes="orchestrator.payment.charge")
def on_refund_ordered(event: IncomingEvent) -> None:
    services.payment_refund_ordered(order_id=order_id_of(event), reason=text_of(event, "reason"))


@participant
def on_return_refund_ordered(event: IncomingEvent) -> None:
    amount, currency = amount_of(event)
    services.payment_refund_returned(order_id=order_id_of(event), amount=amount, currency=currency)
