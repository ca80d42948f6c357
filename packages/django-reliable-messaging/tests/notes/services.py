from django.db import transaction
from reliable_messaging.api import publish

from notes.models import Note


def write_note(text: str, secret: str | None = None, author: str | None = None) -> Note:
    """The note and its event, in one transaction (its secret and author, if any, readable by the archive only)."""
    with transaction.atomic():
        note = Note.objects.create(text=text)
        publish(
            event_type="notes.note.written",
            payload={
                "note_id": str(note.id),
                "text": text,
                **({"secret": secret} if secret else {}),
                **({"author": author} if author else {}),
            },
            aggregate_type="note",
            aggregate_id=str(note.id),
        )
    return note
