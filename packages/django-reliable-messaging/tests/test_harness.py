"""reliable_messaging.testing: a project's handlers tested with no broker and no relay."""

import uuid
from datetime import timedelta

import pytest
from archive.models import Filed, Refusal
from django.db import transaction
from django.utils import timezone
from reliable_messaging.api import publish
from reliable_messaging.testing import (
    Outcome,
    advance_time,
    assert_no_second_effect,
    deliver,
    example_payload,
    published,
)

pytestmark = pytest.mark.django_db


def note(text="hello"):
    return {"note_id": str(uuid.uuid4()), "text": text}


def test_deliver_runs_the_handler_and_returns_what_it_published():
    payload = note()

    delivered = deliver("archive", "notes.note.written", payload, correlation_id="c1")

    assert delivered.outcome is Outcome.HANDLED
    assert list(Filed.objects.values_list("text", flat=True)) == ["hello"]
    assert delivered.published == [("archive.note.filed", 1, {"note_id": payload["note_id"], "filed": 1})]
    assert published("archive", correlation_id="c1") == delivered.published
    assert published("archive", correlation_id="other") == []


def test_a_redelivery_has_no_second_effect():
    delivered = assert_no_second_effect(
        "archive", "notes.note.written", note(), effect=lambda: list(Filed.objects.values_list("note_id", flat=True))
    )
    assert delivered.outcome is Outcome.HANDLED  # the first delivery; the second changed nothing
    assert Filed.objects.count() == 1


def test_a_payload_the_schema_refuses_is_a_dead_letter_and_changes_nothing():
    delivered = deliver("archive", "notes.note.written", {**note(), "text": ""})

    assert (delivered.outcome, delivered.reason) == (Outcome.DEAD_LETTER, "invalid_payload")
    assert delivered.error == "notes.note.written v1 at text: '' should be non-empty"
    assert (Filed.objects.count(), delivered.published) == (0, [])


def test_a_handler_that_refuses_the_message_dead_letters_it():
    Refusal.objects.create(text="no")

    delivered = deliver("archive", "notes.note.written", note("no"))

    assert (delivered.outcome, delivered.reason, delivered.error) == (
        Outcome.DEAD_LETTER,
        "invalid_payload",
        "InvalidPayload: the archive refuses 'no'",
    )
    assert Filed.objects.count() == 0


def test_a_scheduled_event_waits_for_its_time():
    payload = note("later")
    with transaction.atomic():
        publish(
            event_type="notes.note.written",
            payload=payload,
            aggregate_type="note",
            aggregate_id=payload["note_id"],
            deliver_at=timezone.now() + timedelta(hours=1),
        )
    assert published("notes") == []

    assert advance_time(timedelta(minutes=59)) == []
    assert advance_time(timedelta(hours=1, seconds=1)) == [("notes.note.written", 1, payload)]
    assert published("notes") == [("notes.note.written", 1, payload)]


def test_example_payload_is_one_the_schema_accepts():
    payload = example_payload("notes.note.written")

    assert set(payload) == {"note_id", "text"}
    assert uuid.UUID(payload["note_id"])
    assert deliver("archive", "notes.note.written", payload).outcome is Outcome.HANDLED


def test_a_handlers_own_log_lines_carry_the_message_it_handles(caplog):
    from reliable_messaging._logs import FieldsFormatter

    caplog.handler.setFormatter(FieldsFormatter("%(name)s: %(message)s"))
    caplog.set_level("INFO", logger="archive")
    payload = note()

    deliver("archive", "notes.note.written", payload, correlation_id="c-42", message_id="m-42")

    assert caplog.text.splitlines() == [
        "archive.handlers: filed event_type=notes.note.written message_id=m-42 correlation_id=c-42"
    ]
