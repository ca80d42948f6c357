from django.db import transaction
from reliable_messaging.api import publish

from notes.models import Note


def write_note(text: str) -> Note:
    """The note and its event, in one transaction."""
    with transaction.atomic():
        note = Note.objects.create(text=text)
        publish(
            event_type="notes.note.written",
            payload={"note_id": str(note.id), "text": text},
            aggregate_type="note",
            aggregate_id=str(note.id),
        )
    return note
