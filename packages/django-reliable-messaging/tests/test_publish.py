"""publish() checks what it writes: nothing a consumer would refuse reaches the outbox."""

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone
from notes.models import Note
from reliable_messaging.api import OutsideTransactionError, UnpublishableEvent, collecting, publish, write_collected
from reliable_messaging.models import OutboxMessage, ScheduledMessage
from reliable_messaging.testing import published

pytestmark = pytest.mark.django_db


def note_written(payload, event_type="notes.note.written", **more):
    with transaction.atomic():
        Note.objects.create(text="the change the event announces")
        return publish(event_type=event_type, payload=payload, aggregate_type="note", aggregate_id="n1", **more)


def nothing_written():
    return (Note.objects.count(), OutboxMessage.objects.count(), ScheduledMessage.objects.count()) == (0, 0, 0)


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ({"note_id": str(uuid.uuid4())}, "notes.note.written v1 at (the payload): 'text' is a required property"),
        ({"note_id": "n1", "text": "hi"}, "notes.note.written v1 at note_id: 'n1' is not a 'uuid'"),
        ({"note_id": str(uuid.uuid4()), "text": ""}, "notes.note.written v1 at text: '' should be non-empty"),
        (
            {"note_id": str(uuid.uuid4()), "text": "hi", "extra": 1},
            "notes.note.written v1 at (the payload): Additional properties are not allowed ('extra' was unexpected)",
        ),
    ],
)
def test_a_payload_its_schema_refuses_is_not_written_and_the_error_names_the_field(payload, why):
    with pytest.raises(UnpublishableEvent) as refused:
        note_written(payload)

    assert str(refused.value) == why
    assert nothing_written()


def test_a_payload_that_is_not_json_is_refused():
    with pytest.raises(UnpublishableEvent) as refused:
        note_written({"note_id": str(uuid.uuid4()), "text": Decimal("1.5")})

    assert str(refused.value) == (
        "notes.note.written v1: the payload is not JSON (Object of type Decimal is not JSON serializable)"
    )
    assert nothing_written()


def test_a_payload_is_checked_as_a_consumer_reads_it():
    # A tuple is an array once it is JSON: what the consumer gets, and what the schema judges.
    with pytest.raises(UnpublishableEvent, match="at text: \\['h', 'i'\\] is not of type 'string'"):
        note_written({"note_id": str(uuid.uuid4()), "text": ("h", "i")})
    assert nothing_written()


@pytest.mark.parametrize(
    ("event_type", "why"),
    [
        (
            "notes.note.deleted",
            "notes.note.deleted is not declared: add it to [publishes] of the context.toml of 'notes' "
            "(an installed context, MESSAGING['DECLARED_CONTEXTS'])",
        ),
        (
            "billing.invoice.sent",
            "billing.invoice.sent is not declared: add it to [publishes] of the context.toml of 'billing' "
            "(an installed context, MESSAGING['DECLARED_CONTEXTS'])",
        ),
    ],
)
def test_an_event_type_no_context_declares_is_refused(event_type, why):
    with pytest.raises(UnpublishableEvent) as refused:
        note_written({"note_id": str(uuid.uuid4()), "text": "hi"}, event_type=event_type)

    assert str(refused.value) == why
    assert nothing_written()


def test_a_version_with_no_schema_is_refused():
    with pytest.raises(UnpublishableEvent) as refused:
        note_written({"note_id": str(uuid.uuid4()), "text": "hi"}, schema_version=2)

    assert str(refused.value) == (
        "notes.note.written v2 has no schema (notes.note.written.v2.json beside its declaration)"
    )
    assert nothing_written()


def test_a_scheduled_event_is_checked_when_it_is_scheduled():
    with pytest.raises(UnpublishableEvent):
        note_written({"note_id": "n1", "text": "hi"}, deliver_at=timezone.now() + timedelta(hours=1))
    assert nothing_written()


@pytest.mark.django_db(transaction=True)
def test_publish_outside_a_transaction_is_refused():
    with pytest.raises(OutsideTransactionError):
        publish(
            event_type="notes.note.written",
            payload={"note_id": str(uuid.uuid4()), "text": "hi"},
            aggregate_type="note",
            aggregate_id="n1",
        )
    assert nothing_written()


def test_a_valid_event_is_written_once_with_its_version():
    note_id = str(uuid.uuid4())
    message_id = note_written({"note_id": note_id, "text": "hi"})

    row = OutboxMessage.objects.get()
    assert (row.event_id, row.source, row.schema_version, row.payload) == (
        message_id, "notes", 1, {"note_id": note_id, "text": "hi"},
    )  # fmt: skip
    assert published("notes") == [("notes.note.written", 1, {"note_id": note_id, "text": "hi"})]


def test_collected_rows_are_written_only_by_write_collected_in_one_insert(django_assert_num_queries):
    note_ids = [str(uuid.uuid4()) for _ in range(3)]
    with transaction.atomic():
        with collecting() as rows:
            message_ids = [note_written({"note_id": note_id, "text": "hi"}) for note_id in note_ids]
        assert (len(rows), OutboxMessage.objects.count()) == (3, 0)  # handed over, not written
        with django_assert_num_queries(1):
            write_collected(rows)

    stored = {row.event_id: row.payload for row in OutboxMessage.objects.all()}
    assert stored == {m: {"note_id": n, "text": "hi"} for m, n in zip(message_ids, note_ids, strict=True)}
    assert published("notes") == [("notes.note.written", 1, {"note_id": n, "text": "hi"}) for n in note_ids]


@pytest.mark.django_db(transaction=True)
def test_write_collected_outside_a_transaction_is_refused():
    with transaction.atomic(), collecting() as rows:
        publish(
            event_type="notes.note.written",
            payload={"note_id": str(uuid.uuid4()), "text": "hi"},
            aggregate_type="note",
            aggregate_id="n1",
        )

    with pytest.raises(OutsideTransactionError) as refused:
        write_collected(rows)
    assert str(refused.value) == "write_collected() must run inside the transaction that published the rows"
    assert nothing_written()


def test_the_harness_refuses_to_read_back_a_row_written_past_publish():
    OutboxMessage.objects.create(
        source="notes", event_type="notes.note.written", aggregate_type="note", aggregate_id="n1",
        correlation_id="n1", payload={"text": "no id"},
    )  # fmt: skip

    with pytest.raises(AssertionError) as refused:
        published("notes")

    assert str(refused.value) == (
        "the outbox holds an event no consumer would take: "
        "notes.note.written v1 at (the payload): 'note_id' is a required property"
    )
