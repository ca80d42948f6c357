"""Event ids are time-ordered UUIDs (version 7), so new ids land at the right edge of the indexes."""

import time
import uuid

import pytest
from django.db import transaction
from reliable_messaging._ids import new_event_id
from reliable_messaging.api import publish
from reliable_messaging.models import OutboxMessage
from reliable_messaging.testing import example_payload


def _milliseconds(event_id: uuid.UUID) -> int:
    return event_id.int >> 80


def test_an_event_id_is_a_version_7_uuid_carrying_the_current_millisecond():
    before = time.time_ns() // 1_000_000
    event_id = new_event_id()
    after = time.time_ns() // 1_000_000

    assert event_id.version == 7
    assert event_id.variant == uuid.RFC_4122
    assert before <= _milliseconds(event_id) <= after


def test_event_ids_are_unique_and_ordered_by_their_millisecond():
    ids = []
    for _ in range(5):
        ids += [new_event_id() for _ in range(2_000)]
        time.sleep(0.002)  # time is the subject: the next id is of a later millisecond

    assert len(set(ids)) == 10_000
    assert [_milliseconds(i) for i in ids] == sorted(_milliseconds(i) for i in ids)
    assert len({_milliseconds(i) for i in ids}) >= 5  # several milliseconds, so the order is a real check


@pytest.mark.django_db
def test_publish_gives_each_outbox_row_a_time_ordered_id():
    payload = example_payload("notes.note.written")
    with transaction.atomic():
        first = publish(event_type="notes.note.written", payload=payload, aggregate_type="note", aggregate_id="1")
        time.sleep(0.002)  # time is the subject: the second row is of a later millisecond
        second = publish(event_type="notes.note.written", payload=payload, aggregate_type="note", aggregate_id="2")

    rows = list(OutboxMessage.objects.order_by("event_id").values_list("event_id", flat=True))
    assert rows == [first, second]
    assert {first.version, second.version} == {7}
