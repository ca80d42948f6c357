"""Operators' tools: dead letters (list, show, replay, purge), parked rows, retention."""

import json
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from kombu import Queue
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging._housekeeping import messages_purge, outbox_retry_parked
from reliable_messaging.models import DeadLetter, EventLogEntry, InboxMessage, OutboxMessage

from faultlib import broker as broker_support
from faultlib.processes import wait_until
from faultlib.saga import ledger
from payments.models import Payment
from tests.conftest import ALL_DATABASES

transactional = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


def order_created_letter(order_id: str, message_id: str | None) -> DeadLetter:
    payload = {
        "order_id": order_id,
        "customer_id": "c",
        "total": "12.50",
        "currency": "USD",
        "items": [{"sku": "WIDGET", "quantity": 1, "unit_price": "12.50"}],
        "payment_token": "tok_visa",
    }
    return dead_letter_record(
        consumer="payments",
        body=json.dumps(payload).encode(),
        properties={"message_id": message_id, "correlation_id": order_id} if message_id else {},
        headers={"event_type": "orders.order.created", "schema_version": 1, "x-attempt": 5},
        routing_key="orders.order.created",
        reason="handler_error",
        error="TransientError: gateway: the gateway is unavailable",
        attempts=5,
    )


def queue_depth(name: str) -> int:
    with broker_support.connection() as conn:
        return Queue(name)(conn.default_channel).queue_declare(passive=True).message_count


@transactional
def test_list_show_replay_and_purge_dead_letters(processes, quiet_broker):
    order_id, message_id = str(uuid.uuid4()), str(uuid.uuid4())
    letter = order_created_letter(order_id, message_id)
    anonymous = order_created_letter(str(uuid.uuid4()), None)

    empty = processes.run("dead_letters", "list", "--consumer", "inventory")
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "no dead letters for inventory\n", "")
    # A table on stdout, header included (nothing on stderr); the correlation column is the order id.
    listing = processes.run("dead_letters", "list")
    ids = max(len("id"), len(str(anonymous.pk)))
    assert (listing.returncode, listing.stderr) == (0, "")
    assert listing.stdout.splitlines() == [
        f"{'id':<{ids}}  consumer  {'correlation':<36}  {'message_id':<36}  reason         state",
        f"{letter.pk:<{ids}}  payments  {order_id}  {message_id}  handler_error  waiting",
        f"{anonymous.pk:<{ids}}  payments  {'-':<36}  {'-':<36}  handler_error  waiting",
    ]
    scripted = processes.run("dead_letters", "list", "--json")
    assert [json.loads(line) for line in scripted.stdout.splitlines()] == [
        {
            "id": one.pk,
            "consumer": "payments",
            "correlation_id": order,
            "message_id": message,
            "event_type": "orders.order.created",
            "reason": "handler_error",
            "attempts": 5,
            "last_failed_at": one.last_failed_at.isoformat(),
            "replayed_at": None,
        }
        for one, order, message in ((letter, order_id, message_id), (anonymous, None, None))
    ]
    shown = processes.run("dead_letters", "show", str(letter.pk)).stdout
    assert "tok_****" in shown and "tok_visa" not in shown
    assert "TransientError" in shown

    replay = processes.run("dead_letters", "replay", str(letter.pk))
    assert replay.returncode == 0, replay.stderr
    assert "replayed" in replay.stdout
    # Only the original consumer's queue got it.
    assert (queue_depth("payments_queue"), queue_depth("inventory_queue"), queue_depth("events_queue")) == (1, 0, 0)
    letter.refresh_from_db()
    assert processes.run("dead_letters", "list").stdout.splitlines()[1] == (
        f"{letter.pk:<{ids}}  payments  {order_id}  {message_id}  handler_error  "
        f"replayed {letter.replayed_at:%Y-%m-%d %H:%M:%S}"
    )
    waiting = processes.run("dead_letters", "list", "--waiting")
    assert waiting.stdout.splitlines() == [
        f"{'id':<{ids}}  consumer  correlation  message_id  reason         state",
        f"{anonymous.pk:<{ids}}  payments  -            -           handler_error  waiting",
    ]
    assert processes.run("run_consumers", "payments", "--once").returncode == 0
    charged = [("charge", Decimal("12.50"))]
    wait_until(lambda: ledger(order_id) == charged, timeout=30, message="the gateway worker's charge")
    letter.refresh_from_db()
    assert (letter.replay_count, letter.replayed_at is not None) == (1, True)

    # The same message again: the inbox remembers it, so the command refuses and says why.
    again = processes.run("dead_letters", "replay", str(letter.pk))
    assert again.returncode == 1
    assert "already handled" in again.stdout
    # --new-id runs it again; the payment's own state still stops a second charge.
    fresh = processes.run("dead_letters", "replay", str(letter.pk), "--new-id")
    assert fresh.returncode == 0, fresh.stdout
    assert processes.run("run_consumers", "payments", "--once").returncode == 0
    assert ledger(order_id) == [("charge", Decimal("12.50"))]
    assert InboxMessage.objects.filter(consumer="payments", correlation_id=order_id).count() == 2
    assert Payment.objects.get(order_id=order_id).status == Payment.Status.CHARGED

    no_id = processes.run("dead_letters", "replay", str(anonymous.pk))
    assert no_id.returncode == 1 and "--new-id" in no_id.stdout

    purged = processes.run("dead_letters", "purge", str(letter.pk), str(anonymous.pk))
    assert purged.stdout.strip() == "2 dead letter(s) purged"
    assert DeadLetter.objects.count() == 0


@transactional
def test_the_same_message_dead_lettered_again_updates_its_row():
    message_id = str(uuid.uuid4())
    first = order_created_letter(str(uuid.uuid4()), message_id)
    DeadLetter.objects.filter(pk=first.pk).update(replayed_at=timezone.now())
    second = order_created_letter(str(uuid.uuid4()), message_id)

    assert second.pk == first.pk
    assert (second.attempts, second.replayed_at) == (10, None)
    assert DeadLetter.objects.count() == 1


def make_row(n: int, *, published_days_ago=None, parked=False, created_days_ago=30) -> OutboxMessage:
    now = timezone.now()
    return OutboxMessage.objects.create(
        source="test",
        aggregate_type="thing",
        aggregate_id=str(n),
        event_type="test.thing.happened",
        correlation_id=str(n),
        payload={},
        created_at=now - timedelta(days=created_days_ago),
        published_at=None if published_days_ago is None else now - timedelta(days=published_days_ago),
        parked_at=now if parked else None,
        attempts=10 if parked else 0,
    )


@pytest.mark.django_db
def test_purge_deletes_only_what_is_past_retention_and_never_a_pending_or_parked_row():
    old_published = make_row(1, published_days_ago=8)
    recent_published = make_row(2, published_days_ago=1)
    ancient_pending = make_row(3)
    ancient_parked = make_row(4, parked=True)
    now = timezone.now()
    InboxMessage.objects.create(consumer="payments", message_id="old", handled_at=now - timedelta(days=15))
    InboxMessage.objects.create(consumer="payments", message_id="new", handled_at=now - timedelta(days=13))
    EventLogEntry.objects.create(message_id="old", event_type="x", recorded_at=now - timedelta(days=91))
    EventLogEntry.objects.create(message_id="new", event_type="x", recorded_at=now - timedelta(days=89))

    result = messages_purge()

    assert (result.outbox, result.inbox, result.event_log) == (1, 1, 1)
    assert set(OutboxMessage.objects.values_list("pk", flat=True)) == {
        recent_published.pk,
        ancient_pending.pk,
        ancient_parked.pk,
    }
    assert not OutboxMessage.objects.filter(pk=old_published.pk).exists()
    assert list(InboxMessage.objects.values_list("message_id", flat=True)) == ["new"]
    assert list(EventLogEntry.objects.values_list("message_id", flat=True)) == ["new"]


@pytest.mark.django_db
def test_parked_rows_can_be_given_fresh_attempts():
    parked = make_row(1, parked=True)
    other_parked = make_row(2, parked=True)

    assert outbox_retry_parked(ids=[parked.pk]) == 1
    parked.refresh_from_db()
    assert (parked.parked_at, parked.attempts, parked.next_attempt_at) == (None, 0, None)
    other_parked.refresh_from_db()
    assert other_parked.parked_at is not None
    assert outbox_retry_parked() == 1
