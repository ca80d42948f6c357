import logging

from reliable_messaging.api import IncomingEvent, InvalidPayload, publish

from archive.models import Filed, Refusal

logger = logging.getLogger(__name__)


def on_note_written(event: IncomingEvent) -> None:
    text = event.payload["text"]
    if Refusal.objects.filter(text=text).exists():
        raise InvalidPayload(f"the archive refuses {text!r}")
    Filed.objects.create(note_id=event.payload["note_id"], text=text)
    logger.info("filed")
    publish(
        event_type="archive.note.filed",
        payload={"note_id": event.payload["note_id"], "filed": Filed.objects.count()},
        aggregate_type="note",
        aggregate_id=event.payload["note_id"],
        correlation_id=event.correlation_id,
    )


def on_note_priced(event: IncomingEvent) -> None:
    """Any version, read as v2 (archive/upcasters.py)."""
    logger.info("priced: %d words", event.payload["words"])
