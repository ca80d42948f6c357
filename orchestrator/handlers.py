"""The orchestrator's message handlers: thin readers of the payload over the services.
Each is subscribed by the context's declaration (context.toml, under ``consumes``)."""

from reliable_messaging.api import IncomingEvent

from orchestrator import services
from orchestrator.events import is_orchestrated, new_saga_of, order_id_of, reply_check, step_deadline_of, was_pending


def on_order_created(event: IncomingEvent) -> None:
    if is_orchestrated(event):  # a choreographed order is payments' to charge, not ours
        services.saga_start(new_saga_of(event))


def on_reply(event: IncomingEvent) -> None:
    services.saga_reply(order_id=order_id_of(event), event_type=event.event_type, check=reply_check(event))


def on_order_ended(event: IncomingEvent) -> None:
    services.saga_order_ended(
        order_id=order_id_of(event),
        event_type=event.event_type,
        was_pending=was_pending(event),
        orchestrated=is_orchestrated(event),
    )


def on_step_deadline(event: IncomingEvent) -> None:
    services.saga_step_deadline(**step_deadline_of(event))
