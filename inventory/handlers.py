"""Inventory's message handlers: thin readers of the payload over the services.
Each is subscribed by the context's declaration (context.toml, under ``consumes``)."""

from reliable_messaging.api import IncomingEvent, in_runs, in_turn
from reliable_messaging.sagas import participant

from inventory import services
from inventory.events import lines_of, order_id_of


@in_runs
def on_payment_succeeded(events: list[IncomingEvent]) -> None:
    requests = [(order_id_of(event), lines_of(event)) for event in events]
    services.stock_reserve(requests, turn=lambda n: in_turn(events[n]))


def on_order_cancelled(event: IncomingEvent) -> None:
    services.stock_release(order_id=order_id_of(event), reason="cancelled")


def on_order_failed(event: IncomingEvent) -> None:
    services.stock_release(order_id=order_id_of(event), reason=str(event.payload.get("reason") or "failed"))


@participant
@in_runs
def on_reserve_ordered(events: list[IncomingEvent]) -> None:
    requests = [(order_id_of(event), lines_of(event)) for event in events]
    services.stock_reserve_ordered(requests, turn=lambda n: in_turn(events[n]))


@participant(undoes="orchestrator.stock.reserve")
def on_release_ordered(event: IncomingEvent) -> None:
    services.stock_release_ordered(order_id=order_id_of(event), reason=str(event.payload.get("reason") or "failed"))


@participant
def on_restock_ordered(event: IncomingEvent) -> None:
    services.stock_restock_returned(order_id=order_id_of(event))


@participant(undoes="orders.return.restock")
def on_take_back_ordered(event: IncomingEvent) -> None:
    services.stock_take_back_returned(order_id=order_id_of(event))
