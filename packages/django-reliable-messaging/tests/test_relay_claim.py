"""The relay's claim on PostgreSQL is one fixed SQL text (reliable_messaging._relay._claim_sql): it
claims exactly the rows, in exactly the order and with exactly the values, of the queryset it
stands for (``claim_query``), and locks them so that a second relay skips them."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone
from reliable_messaging._relay import claim_batch, claim_query
from reliable_messaging.models import OutboxMessage

pytestmark = pytest.mark.django_db(transaction=True)


def payload(n: int) -> dict:
    return {"n": n, "text": 'é "quoted" 😀', "nested": [{"none": None}]}


def row(n: int, **fields) -> OutboxMessage:
    return OutboxMessage.objects.create(
        source="test",
        aggregate_type="thing",
        aggregate_id=str(n),
        event_type="test.thing.happened",
        correlation_id=f"c-{n}",
        causation_id=f"m-{n}" if n % 2 else "",
        traceparent="",
        payload=payload(n),
        created_at=datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC) + timedelta(seconds=(7 * n) % 10),
        **fields,
    )


def test_the_claim_takes_what_the_queryset_names_in_its_order_with_its_values():
    now = timezone.now()
    for n in range(10):
        row(n)
    row(10, published_at=now)
    row(11, parked_at=now)
    row(12, next_attempt_at=now + timedelta(minutes=5), attempts=1)
    row(13, next_attempt_at=now - timedelta(minutes=5), attempts=2)

    with transaction.atomic():
        expected = list(claim_query(8))
    with transaction.atomic():
        claimed = claim_batch(8)

    assert [tuple(r) for r in claimed] == [tuple(r) for r in expected]
    assert [r._fields for r in claimed[:1]] == [r._fields for r in expected[:1]]
    assert len(claimed) == 8
    assert {r.correlation_id for r in claimed} <= {f"c-{n}" for n in (*range(10), 13)}
    assert claimed[0].payload == payload(int(claimed[0].correlation_id[2:]))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SKIP LOCKED is PostgreSQL's (SQLite has one writer)")
def test_a_second_relay_skips_the_rows_a_first_holds():
    for n in range(4):
        row(n)
    held, other = threading.Event(), {}

    def second_relay() -> None:
        held.wait(10)
        try:
            with transaction.atomic():
                other["claimed"] = [r.correlation_id for r in claim_batch(10)]
        finally:
            connections.close_all()

    thread = threading.Thread(target=second_relay)
    thread.start()
    with transaction.atomic():
        first = [r.correlation_id for r in claim_batch(2)]
        held.set()
        thread.join(10)
    assert not thread.is_alive()
    assert len(first) == 2
    assert sorted(first + other["claimed"]) == sorted(f"c-{n}" for n in range(4))  # each once, none twice
    assert connection.vendor == "postgresql"  # the fixed text is PostgreSQL's claim
