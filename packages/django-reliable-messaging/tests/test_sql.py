"""The one-statement inserts of the hot paths (reliable_messaging._sql, private) store exactly
what the ORM stores, on PostgreSQL (one JSON parameter, or one array per column) and on SQLite
(a VALUES list); so does the one-statement update of many rows (one JSON parameter, or a CASE
per field)."""

import uuid
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from archive.models import Tally
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext
from reliable_messaging._sql import insert_row, insert_rows, rows_statement, update_rows
from reliable_messaging.models import DeadLetter, InboxMessage, OutboxMessage, SagaInstance

pytestmark = pytest.mark.django_db
postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="SQLite stores a text of any length in a varchar"
)

PAYLOAD = {"note_id": "n-1", "total": "19.99", "nested": {"items": [{"word": "WÍDGET", "q": 2}]}, "none": None}


def outbox_values(n: int) -> dict:
    return {
        "event_id": uuid.uuid4(),
        "source": "notes",
        "event_type": "notes.note.written",
        "aggregate_type": "note",
        "aggregate_id": f"a-{n}",
        "correlation_id": f"c-{n}",
        "causation_id": "",
        "traceparent": "",
        "schema_version": 1,
        "payload": {**PAYLOAD, "n": n},
        "created_at": datetime(2026, 11, 23, 12, 0, n, 123456, tzinfo=UTC),
        "attempts": 0,
        "last_error": "",
    }


def stored(row: OutboxMessage) -> tuple:
    return (row.source, row.event_type, row.aggregate_id, row.payload, row.created_at, row.schema_version)


def test_many_rows_in_one_statement_read_back_as_the_orm_and_insert_row_store_them():
    many = [outbox_values(n) for n in range(3)]
    single = outbox_values(9)

    insert_rows(OutboxMessage, many)
    insert_row(OutboxMessage, single)
    orm = OutboxMessage.objects.create(**{**outbox_values(7), "event_id": uuid.uuid4()})

    for values in [*many, single]:
        row = OutboxMessage.objects.get(event_id=values["event_id"])
        assert stored(row) == (
            values["source"], values["event_type"], values["aggregate_id"], values["payload"], values["created_at"], 1,
        )  # fmt: skip
    assert OutboxMessage.objects.get(pk=orm.pk).payload == {**PAYLOAD, "n": 7}


def test_many_rows_skip_conflicts_and_return_what_they_inserted():
    InboxMessage.objects.create(consumer="c", message_id="m-1")
    now = datetime.now(UTC)
    rows = [
        {"consumer": "c", "message_id": f"m-{n}", "event_type": "t", "correlation_id": "", "handled_at": now}
        for n in range(3)
    ]

    inserted = insert_rows(InboxMessage, rows, ignore_conflict_on=("consumer", "message_id"), returning="message_id")

    assert inserted == {"m-0", "m-2"}
    assert sorted(InboxMessage.objects.values_list("message_id", flat=True)) == ["m-0", "m-1", "m-2"]


@postgresql_only
def test_a_value_too_long_for_its_column_is_refused_not_truncated():
    now = datetime.now(UTC)
    rows = [
        {"consumer": "c", "message_id": "m-ok", "event_type": "t", "correlation_id": "", "handled_at": now},
        {"consumer": "c" * 51, "message_id": "m-long", "event_type": "t", "correlation_id": "", "handled_at": now},
    ]

    with pytest.raises(DataError), transaction.atomic():
        insert_rows(InboxMessage, rows)

    assert InboxMessage.objects.count() == 0


HARD_TEXT = "quote \" backslash \\ apostrophe ' braces {a,b} tab\t newline\n é 😀 NULL"


def test_rows_travel_as_one_statement_and_every_kind_of_value_reads_back_as_the_orm_stores_it():
    rows = [
        {
            "note_id": uuid.uuid4(),
            "status": "counting",
            "amount": Decimal("1234567890.05"),
            "currency": "USD",
            "reference": "r_1",
            "recount_reference": "",
            "refusal_code": "",
            "secret": HARD_TEXT,
            "items": [{"word": "WÍDGET", "q": 2, "price": "9.99", "nested": {"none": None, "flag": True}}],
            "causes": {"text": HARD_TEXT},
            "due_at": datetime(2026, 11, 26, 23, 59, 59, 999999, tzinfo=UTC),
            "attempts": 2**31 - 1,
            "created_at": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
            "updated_at": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
        },
        {
            "note_id": str(uuid.uuid4()),  # as the ORM takes it: text is a UUID too
            "status": "new",
            "amount": None,
            "currency": "",
            "reference": "",
            "recount_reference": "",
            "refusal_code": "",
            "secret": "",
            "items": [],
            "causes": {},
            "due_at": None,
            "attempts": 0,
            "created_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
            "updated_at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        },
    ]
    sql, params = rows_statement(Tally, rows)
    if connection.vendor == "postgresql":
        assert "jsonb_array_elements" in sql and len(params) == 1 and isinstance(params[0], str)
    else:
        assert sql.count("(%s, ") == 2 and len(params) == 2 * 14  # one VALUES list

    insert_rows(Tally, rows)

    for values in rows:
        row = Tally.objects.get(note_id=values["note_id"])
        assert {name: getattr(row, name) for name in values if name != "note_id"} == {
            name: value for name, value in values.items() if name != "note_id"
        }


def test_a_json_value_json_cannot_encode_fails_as_the_orm_would_and_stores_nothing():
    row = outbox_values(1) | {"payload": {"total": Decimal("1.00")}}  # a Decimal is not JSON

    with pytest.raises(TypeError), transaction.atomic():
        insert_rows(OutboxMessage, [row])
    assert OutboxMessage.objects.count() == 0


def test_a_model_with_a_field_json_cannot_carry_takes_one_array_per_column():
    body = bytes(range(256))  # a dead letter's body is bytes, kept exactly
    now = datetime.now(UTC)
    rows = [
        {
            **{"consumer": "c", "message_id": f"m-{n}", "event_type": "e", "routing_key": "e", "correlation_id": ""},
            **{"reason": "r", "error": HARD_TEXT, "traceback": "", "body": body, "headers": {"n": n}, "properties": {}},
            **{"attempts": 1, "first_failed_at": now, "last_failed_at": now, "replay_count": 0},
        }
        for n in range(2)
    ]
    sql, _ = rows_statement(DeadLetter, rows)
    assert ("unnest(" in sql) is (connection.vendor == "postgresql")

    insert_rows(DeadLetter, rows)

    stored_rows = DeadLetter.objects.order_by("message_id")
    assert [(bytes(d.body), d.error, d.headers) for d in stored_rows] == [(body, HARD_TEXT, {"n": n}) for n in range(2)]


def test_many_rows_updated_in_one_statement_each_only_at_the_version_it_names():
    made = [SagaInstance.objects.create(name="n", key=f"k-{n}", definition_version=1, state="s") for n in range(3)]
    when = datetime(2026, 11, 29, 13, 0, 0, 123456, tzinfo=UTC)
    changes = [
        {"state": "reserving", "data": {"text": HARD_TEXT, "n": [1, None]}, "deadline_id": uuid.uuid4(), "attempt": 2},
        {"state": "charging", "data": {}, "deadline_id": None, "attempt": 0},
        {"state": "never", "data": {"lost": True}, "deadline_id": None, "attempt": 9},
    ]
    versions = [1, 1, 7]  # the third was moved meanwhile: its version is no longer 7's
    rows = [
        {"id": i.pk, "version": v, **c, "failure_reason": "", "step_since": when, "updated_at": when}
        for i, v, c in zip(made, versions, changes, strict=True)
    ]

    with CaptureQueriesContext(connection) as queries:
        updated = update_rows(SagaInstance, rows, where=("id", "version"), bump="version")

    assert updated == 2
    assert len(queries) == 1
    read = {i.pk: SagaInstance.objects.get(pk=i.pk) for i in made}
    for instance, change in zip(made[:2], changes[:2], strict=True):
        row = read[instance.pk]
        assert (row.state, row.data, row.deadline_id, row.attempt) == tuple(change.values())
        assert (row.version, row.step_since, row.updated_at) == (2, when, when)
    untouched = read[made[2].pk]
    assert (untouched.state, untouched.data, untouched.attempt, untouched.version) == ("s", {}, 0, 1)


@postgresql_only
def test_an_update_too_long_for_its_column_is_refused_and_changes_nothing():
    instance = SagaInstance.objects.create(name="n", key="k", definition_version=1, state="s")
    row = {"id": instance.pk, "version": 1, "state": "s" * 101}

    with pytest.raises(DataError), transaction.atomic():
        update_rows(SagaInstance, [row], where=("id", "version"), bump="version")

    assert SagaInstance.objects.get(pk=instance.pk).state == "s"
