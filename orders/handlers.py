"""Orders' message handlers: thin readers of the payload over the services.
Each is subscribed by the context's declaration (context.toml, under ``consumes``)."""

from reliable_messaging.api import IncomingEvent, in_runs, in_turn

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
    FAIL_ORDERED,
    PAYMENT_SUCCEEDED,
    STOCK_RESERVED,
    SagaEvent,
    order_end_as_ordered,
    order_saga_apply,
)
from orders.services.storefront import storefront_products_apply


@in_runs
def on_saga_event(events: list[IncomingEvent]) -> None:
    """Payments' and inventory's outcomes for a choreographed order (orders.services.saga.SAGA)."""
    order_saga_apply([_saga_event(event) for event in events], turn=lambda n: in_turn(events[n]))


def _saga_event(event: IncomingEvent) -> SagaEvent:
    order_id = order_id_of(event)
    if event.event_type == PAYMENT_SUCCEEDED:
        payment = payment_of(event)
        return SagaEvent(order_id, event.event_type, charged=(payment["amount"], payment["currency"]))
    if event.event_type == STOCK_RESERVED:
        return SagaEvent(order_id, event.event_type, reserved=reserved_lines_of(event))
    return SagaEvent(order_id, event.event_type)


@in_runs
def on_product_updated(events: list[IncomingEvent]) -> None:
    storefront_products_apply([product_update_of(event) for event in events])  # publishes nothing


@in_runs
def on_end_ordered(events: list[IncomingEvent]) -> None:
    """The orchestrator's ``orchestrator.order.confirm`` and ``orchestrator.order.fail``."""
    ends = [
        (order_id_of(e), e.event_type, failure_reason_of(e) if e.event_type == FAIL_ORDERED else "") for e in events
    ]
    order_end_as_ordered(ends, turn=lambda n: in_turn(events[n]))


def on_return_reply(event: IncomingEvent) -> None:
    return_reply(order_id=order_id_of(event), event_type=event.event_type, check=refund_check(event))


def on_return_step_deadline(event: IncomingEvent) -> None:
    return_step_deadline(**step_deadline_of(event))
