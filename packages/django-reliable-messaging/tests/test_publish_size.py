"""publish() refuses a payload larger than MAX_MESSAGE_BYTES as the relay would send it: a consumer
would dead-letter it (payload_too_large) after the change it announces was committed."""

import uuid

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings
from notes.models import Note
from reliable_messaging.api import UnpublishableEvent, publish
from reliable_messaging.models import OutboxMessage
from reliable_messaging.testing import published

pytestmark = pytest.mark.django_db

NOTE_ID = "6f1c0c52-8d1e-4a57-9a7e-0b6f1f2a3c4d"


def note_written(text: str) -> uuid.UUID:
    with transaction.atomic():
        Note.objects.create(text=text)
        payload = {"note_id": NOTE_ID, "text": text}
        return publish(event_type="notes.note.written", payload=payload, aggregate_type="note", aggregate_id="n1")


def test_a_payload_over_the_limit_is_refused_before_anything_is_written():
    # {"note_id":"<36>","text":"<n>"} is 60 bytes plus the text, as sent (compact JSON).
    with override_settings(MESSAGING={**settings.MESSAGING, "MAX_MESSAGE_BYTES": 100}):
        with pytest.raises(UnpublishableEvent) as refused:
            note_written("x" * 41)

    assert str(refused.value) == (
        "notes.note.written v1: the payload is 101 bytes as sent, over MAX_MESSAGE_BYTES (100): "
        "send a reference to the data instead"
    )
    assert (Note.objects.count(), OutboxMessage.objects.count()) == (0, 0)


def test_a_payload_at_the_limit_is_written():
    with override_settings(MESSAGING={**settings.MESSAGING, "MAX_MESSAGE_BYTES": 100}):
        note_written("x" * 40)

    assert [(row.event_type, len(row.payload["text"])) for row in OutboxMessage.objects.all()] == [
        ("notes.note.written", 40)
    ]
    assert [event_type for event_type, _, _ in published("notes")] == ["notes.note.written"]


def test_with_claim_checks_on_a_payload_is_bounded_by_claim_check_max_bytes():
    # Over MAX_MESSAGE_BYTES the relay stores it apart: publish() bounds it by CLAIM_CHECK_MAX_BYTES.
    limits = {"MAX_MESSAGE_BYTES": 100, "CLAIM_CHECK_BYTES": 80, "CLAIM_CHECK_MAX_BYTES": 200}
    with override_settings(MESSAGING={**settings.MESSAGING, **limits}):
        note_written("x" * 140)
        with pytest.raises(UnpublishableEvent) as refused:
            note_written("x" * 141)

    assert str(refused.value) == (
        "notes.note.written v1: the payload is 201 bytes as sent, over CLAIM_CHECK_MAX_BYTES (200): "
        "send a reference to the data instead"
    )
    assert [len(row.payload["text"]) for row in OutboxMessage.objects.all()] == [140]
