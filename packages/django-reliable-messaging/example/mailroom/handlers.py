from reliable_messaging.api import IncomingEvent, publish

from mailroom.models import Letter


def on_greeting_sent(event: IncomingEvent) -> None:
    """Runs inside the transaction that records the message in the inbox: a redelivery of the
    same message never reaches it again, so the letter and its event are written once."""
    payload = event.payload
    Letter.objects.create(greeting_id=payload["greeting_id"], to=payload["to"], text=payload["text"])
    publish(
        event_type="mailroom.letter.filed",
        payload={
            "greeting_id": payload["greeting_id"],
            "letters_to_recipient": Letter.objects.filter(to=payload["to"]).count(),
        },
        aggregate_type="letter",
        aggregate_id=payload["greeting_id"],
        correlation_id=event.correlation_id,
    )
