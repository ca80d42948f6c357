"""Shipping's message handlers: thin readers of the payload over the services.
Each is subscribed by the context's declaration (context.toml, under ``consumes``)."""

from reliable_messaging.api import IncomingEvent, in_runs, in_turn
from reliable_messaging.sagas import participant

from shipping import services
from shipping.events import order_id_of, ship_to_of, was_confirmed


@in_runs
def on_order_confirmed(events: list[IncomingEvent]) -> None:
    services.shipment_prepare([order_id_of(event) for event in events], turn=lambda n: in_turn(events[n]))


def on_order_cancelled(event: IncomingEvent) -> None:
    order_id = order_id_of(event)
    if was_confirmed(event):  # a PENDING order was never confirmed: it has no parcel, now or later
        services.shipment_cancel(order_id=order_id)


@participant
@in_runs
def on_create_ordered(events: list[IncomingEvent]) -> None:
    requests = [(order_id_of(event), ship_to_of(event)) for event in events]
    services.shipment_prepare_ordered(requests, turn=lambda n: in_turn(events[n]))


@participant(undoes="orchestrator.shipment.create")
def on_cancel_ordered(event: IncomingEvent) -> None:
    services.shipment_cancel(order_id=order_id_of(event))


@participant
def on_pickup_book_ordered(event: IncomingEvent) -> None:
    """A return: the parcel stopped, or its pickup booked, as a confirmed order's cancellation does."""
    services.shipment_cancel(order_id=order_id_of(event))


@participant(undoes="orders.return.book_pickup")
def on_pickup_cancel_ordered(event: IncomingEvent) -> None:
    services.shipment_reinstate(order_id=order_id_of(event))
