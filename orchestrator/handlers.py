"""The orchestrator's message handlers: thin readers of the payload over the services.
Each is subscribed by the context's declaration (context.toml, under ``consumes``)."""

from reliable_messaging.api import IncomingEvent, in_runs, in_turn
from reliable_messaging.sagas import Reply

from orchestrator import services
from orchestrator.events import is_orchestrated, new_saga_of, order_id_of, reply_check, step_deadline_of, was_pending


@in_runs
def on_order_created(events: list[IncomingEvent]) -> None:
    # A choreographed order is payments' to charge, not ours.
    orchestrated = [event for event in events if is_orchestrated(event)]
    services.saga_start([new_saga_of(event) for event in orchestrated], turn=lambda n: in_turn(orchestrated[n]))


@in_runs
def on_reply(events: list[IncomingEvent]) -> None:
    replies = [Reply(str(order_id_of(event)), event.event_type, reply_check(event)) for event in events]
    services.saga_reply(replies, turn=lambda n: in_turn(events[n]))


def on_order_ended(event: IncomingEvent) -> None:
    services.saga_order_ended(
        order_id=order_id_of(event),
        event_type=event.event_type,
        was_pending=was_pending(event),
        orchestrated=is_orchestrated(event),
    )


def on_step_deadline(event: IncomingEvent) -> None:
    services.saga_step_deadline(**step_deadline_of(event))
