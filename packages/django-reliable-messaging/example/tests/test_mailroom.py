"""The mailroom's handler, tested with the bus's harness: no broker, no relay, SQLite."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from greetings.services import send_greeting
from mailroom.models import Letter
from reliable_messaging.testing import (
    Outcome,
    advance_time,
    assert_no_second_effect,
    deliver,
    example_payload,
    published,
)

pytestmark = pytest.mark.django_db


def greeting(to="ada@example.com", text="Hello"):
    return {"greeting_id": str(uuid.uuid4()), "to": to, "text": text}


def test_a_greeting_is_filed_as_a_letter_and_the_mailroom_says_so():
    payload = greeting()

    delivered = deliver("mailroom", "greetings.greeting.sent", payload, correlation_id=payload["greeting_id"])

    assert delivered.outcome is Outcome.HANDLED
    assert list(Letter.objects.values_list("to", "text")) == [("ada@example.com", "Hello")]
    assert delivered.published == [
        ("mailroom.letter.filed", 1, {"greeting_id": payload["greeting_id"], "letters_to_recipient": 1})
    ]


def test_a_redelivered_greeting_files_no_second_letter():
    assert_no_second_effect(
        "mailroom", "greetings.greeting.sent", greeting(), effect=lambda: list(Letter.objects.values("greeting_id"))
    )
    assert Letter.objects.count() == 1


def test_a_payload_its_schema_refuses_is_a_dead_letter_and_changes_nothing():
    delivered = deliver("mailroom", "greetings.greeting.sent", {**greeting(), "to": ""})

    assert (delivered.outcome, delivered.reason) == (Outcome.DEAD_LETTER, "invalid_payload")
    assert delivered.error == "greetings.greeting.sent v1 at to: '' should be non-empty"
    assert (Letter.objects.count(), delivered.published) == (0, [])


def test_a_scheduled_greeting_waits_for_its_time_then_is_published():
    send_greeting("bob@example.com", "Later", deliver_at=timezone.now() + timedelta(hours=1))
    assert published("greetings") == []

    assert advance_time(timedelta(minutes=59)) == []
    moved = advance_time(timedelta(hours=1, seconds=1))

    assert [(event.event_type, event.payload["to"]) for event in moved] == [
        ("greetings.greeting.sent", "bob@example.com")
    ]
    assert published("greetings") == moved


def test_an_example_payload_is_one_the_schema_accepts():
    delivered = deliver("mailroom", "greetings.greeting.sent", example_payload("greetings.greeting.sent"))

    assert delivered.outcome is Outcome.HANDLED
