"""Two versions of one event (notes.note.priced): a consumer reads either, upcast to the newest
before its handler; a producer writes the newest, or, while EVENT_VERSIONS pins an older one, that
one through its downcasters."""

import uuid

import pytest
from django.db import transaction
from reliable_messaging.api import publish
from reliable_messaging.models import OutboxMessage
from reliable_messaging.testing import Outcome, deliver

pytestmark = pytest.mark.django_db

PRICED = "notes.note.priced"


def priced_v2(note_id: str) -> dict:
    return {
        "note_id": note_id,
        "total": {"amount": "3.00", "currency": "USD"},
        "lines": [{"word": "a", "count": 2}, {"word": "b", "count": 1}],
        "words": 3,
        "reason": "priced_by_word",
        "remark": "",
    }


def v1_of(payload: dict) -> dict:
    return {name: value for name, value in payload.items() if name != "words"}


@pytest.mark.parametrize(("version", "upcast"), [(1, True), (2, False)])
def test_a_consumer_reads_either_version_as_the_newest(caplog, version, upcast):
    caplog.set_level("INFO", logger="archive")
    payload = priced_v2(str(uuid.uuid4()))

    delivered = deliver("archive", PRICED, v1_of(payload) if upcast else payload, schema_version=version)

    assert delivered.outcome is Outcome.HANDLED
    assert [r.getMessage() for r in caplog.records if r.name == "archive.handlers"] == ["priced: 3 words"]


def test_a_version_the_consumer_cannot_read_is_a_dead_letter():
    delivered = deliver("archive", PRICED, priced_v2(str(uuid.uuid4())), schema_version=3)

    assert (delivered.outcome, delivered.reason) == (Outcome.DEAD_LETTER, "unsupported_schema_version")


def write(payload: dict) -> None:
    with transaction.atomic():
        publish(event_type=PRICED, payload=payload, aggregate_type="note", aggregate_id=payload["note_id"])


def test_a_producer_writes_the_newest_version_or_the_pinned_one_through_its_downcasters(settings):
    newest, pinned = priced_v2(str(uuid.uuid4())), priced_v2(str(uuid.uuid4()))
    write(newest)
    settings.MESSAGING = {**settings.MESSAGING, "EVENT_VERSIONS": "notes.note.priced=1"}
    write(pinned)

    rows = OutboxMessage.objects.order_by("id").values_list("schema_version", "payload")
    assert list(rows) == [(2, newest), (1, v1_of(pinned))]
