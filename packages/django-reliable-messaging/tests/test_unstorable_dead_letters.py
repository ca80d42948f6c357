"""A dead letter is stored whatever the message holds.

A message that cannot be handled leaves a dead letter behind; if the database refused the row
(a NUL in its message id, a header PostgreSQL's JSON cannot hold), the consumer took that for a
database outage: it paused, got the message back, was refused again, for ever, handling nothing
else meanwhile.
"""

import pytest
from django.db import DataError, OperationalError
from reliable_messaging import _consumer as consumer_module
from reliable_messaging._consumer import DatabaseDown, store_dead_letter
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging.models import DeadLetter

pytestmark = pytest.mark.django_db


def letter(**overrides) -> dict:
    return {
        "consumer": "archive",
        "body": b"{\x00}",
        "properties": {"message_id": "m-1", "correlation_id": "c-1"},
        "headers": {"event_type": "notes.note.written"},
        "routing_key": "notes.note.written",
        "reason": "unknown_event_type",
        "error": "no handler",
        **overrides,
    }


def test_nul_characters_are_kept_visible_and_the_row_is_stored():
    stored = dead_letter_record(
        **letter(
            properties={"message_id": "nul\x00id", "correlation_id": "c\x00"},
            headers={"event_type": "notes.\x00", "x-note\x00": ["a\x00", {"b": b"c\x00"}]},
            error="failed on \x00",
        )
    )

    row = DeadLetter.objects.get(pk=stored.pk)
    assert row.message_id == "nul\\x00id"
    assert row.correlation_id == "c\\x00"
    assert row.event_type == "notes.\\x00"
    assert row.headers == {"event_type": "notes.\\x00", "x-note\\x00": ["a\\x00", {"b": "c\\x00"}]}
    assert row.properties == {"message_id": "nul\\x00id", "correlation_id": "c\\x00"}
    assert row.error == "failed on \\x00"
    assert bytes(row.body) == b"{\x00}"  # the body is bytes: kept exactly


def test_a_message_id_longer_than_the_column_is_cut_to_it():
    stored = dead_letter_record(**letter(properties={"message_id": "x" * 300}))

    assert DeadLetter.objects.get(pk=stored.pk).message_id == "x" * 255


def test_a_header_json_cannot_hold_is_kept_as_text():
    stored = dead_letter_record(**letter(headers={"event_type": "e", "ratio": float("nan"), "limit": float("inf")}))

    assert DeadLetter.objects.get(pk=stored.pk).headers == {"event_type": "e", "ratio": "nan", "limit": "inf"}


def test_a_row_the_database_refuses_while_it_answers_is_stored_without_headers(monkeypatch):
    # given a dead letter whose first insert the database refuses (as a value it cannot hold)
    calls = []

    def refuse_the_first(**fields):
        calls.append(fields)
        if len(calls) == 1:
            raise DataError("invalid input syntax for type json")
        return dead_letter_record(**fields)

    monkeypatch.setattr(consumer_module, "dead_letter_record", refuse_the_first)

    # when the consumer stores it
    store_dead_letter(**letter())

    # then it is stored once, without headers and properties, the refusal in its error: no outage
    row = DeadLetter.objects.get()
    assert len(calls) == 2
    assert (row.consumer, row.message_id, row.reason, row.headers, row.properties) == (
        "archive",
        "",
        "unknown_event_type",
        {},
        {},
    )
    assert bytes(row.body) == b"{\x00}"
    assert row.error == (
        "no handler\n(its headers and properties left out, refused by the database: "
        "DataError: invalid input syntax for type json; message id 'm-1')"
    )


def test_a_database_that_does_not_answer_is_an_outage(monkeypatch):
    def down(**fields):
        raise OperationalError("connection refused")

    monkeypatch.setattr(consumer_module, "dead_letter_record", down)
    monkeypatch.setattr(consumer_module, "database_reachable", lambda: False)

    with pytest.raises(DatabaseDown):
        store_dead_letter(**letter())
    assert not DeadLetter.objects.exists()
