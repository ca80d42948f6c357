"""The one-statement inserts of the hot paths store exactly what the ORM stores."""

import uuid
from datetime import UTC, datetime

import pytest
from django.db import DataError, transaction
from reliable_messaging.models import InboxMessage, OutboxMessage
from reliable_messaging.sql import insert_row, insert_rows

pytestmark = pytest.mark.django_db

PAYLOAD = {"order_id": "o-1", "total": "19.99", "nested": {"items": [{"sku": "WÍDGET", "q": 2}]}, "none": None}


def outbox_values(n: int) -> dict:
    return {
        "event_id": uuid.uuid4(),
        "source": "orders",
        "event_type": "orders.order.created",
        "aggregate_type": "order",
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


def test_a_value_too_long_for_its_column_is_refused_not_truncated():
    now = datetime.now(UTC)
    rows = [
        {"consumer": "c", "message_id": "m-ok", "event_type": "t", "correlation_id": "", "handled_at": now},
        {"consumer": "c" * 51, "message_id": "m-long", "event_type": "t", "correlation_id": "", "handled_at": now},
    ]

    with pytest.raises(DataError), transaction.atomic():
        insert_rows(InboxMessage, rows)

    assert InboxMessage.objects.count() == 0
