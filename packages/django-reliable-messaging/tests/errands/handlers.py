"""The errand's host (its replies and deadlines moving the saga) and its participant (its commands)."""

from reliable_messaging.api import IncomingEvent, in_runs, in_turn, publish
from reliable_messaging.sagas import Reply, deadline, participant, reply

from errands.models import Chore, Missing


@in_runs
def on_reply(events: list[IncomingEvent]) -> None:
    replies = [Reply(event.payload["errand_id"], event.event_type) for event in events]
    reply("errand", replies, turn=lambda n: in_turn(events[n]))


def on_deadline(event: IncomingEvent) -> None:
    payload = event.payload
    deadline("errand", payload["errand_id"], step=payload["step"], attempt=payload["attempt"])


def _answer(event: IncomingEvent, reply_type: str) -> None:
    errand_id = event.payload["errand_id"]
    Chore.objects.create(command=event.event_type, errand_id=errand_id, item=event.payload.get("item", ""))
    publish(
        event_type=reply_type,
        payload={"errand_id": errand_id},
        aggregate_type="errand",
        aggregate_id=errand_id,
    )


@participant
def on_fetch(event: IncomingEvent) -> None:
    missing = Missing.objects.filter(item=event.payload["item"], undeliverable=False).exists()
    _answer(event, "errands.item.missing" if missing else "errands.item.fetched")


@participant
def on_wrap(event: IncomingEvent) -> None:
    _answer(event, "errands.item.wrapped")


@participant
def on_deliver(event: IncomingEvent) -> None:
    undeliverable = Missing.objects.filter(undeliverable=True).exists()
    _answer(event, "errands.item.undeliverable" if undeliverable else "errands.item.delivered")


@participant(undoes="errands.item.fetch")
def on_return(event: IncomingEvent) -> None:
    _answer(event, "errands.item.returned")


@participant(undoes="errands.item.deliver")
def on_recall(event: IncomingEvent) -> None:
    Chore.objects.create(command=event.event_type, errand_id=event.payload["errand_id"])
