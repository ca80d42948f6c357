"""The outbox relay against real PostgreSQL and RabbitMQ, in real processes."""

import threading
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.utils import timezone
from kombu import Exchange
from reliable_messaging._relay import OutboxRelay
from reliable_messaging.api import OutsideTransactionError, publish
from reliable_messaging.models import EventLogEntry, InboxMessage, OutboxMessage

from fake_gateway.in_process import gateway
from faultlib import broker as broker_support
from faultlib.processes import wait_until
from orders.models import StorefrontProduct
from orders.services.checkout import Line, order_place
from tests.conftest import ALL_DATABASES
from tests.support.outbox import unchecked_publishing

transactional = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


def publish_things(count: int, event_type: str = "test.thing.happened") -> list[str]:
    with unchecked_publishing(), transaction.atomic():
        return [
            str(publish(event_type=event_type, payload={"n": n}, aggregate_type="thing", aggregate_id=str(n)))
            for n in range(count)
        ]


def unpublished() -> int:
    return OutboxMessage.objects.filter(published_at__isnull=True).count()


class LateTransaction(threading.Thread):
    """Writes an outbox row in a transaction that commits only when told to."""

    def __init__(self):
        super().__init__(daemon=True)
        self.written = threading.Event()
        self.release = threading.Event()
        self.message_id = None

    def run(self):
        try:
            with unchecked_publishing(), transaction.atomic():
                self.message_id = str(
                    publish(
                        event_type="test.thing.late", payload={"late": True}, aggregate_type="thing", aggregate_id="L"
                    )
                )
                self.written.set()
                self.release.wait(timeout=120)
        finally:
            connection.close()


@transactional
def test_publish_refuses_to_run_outside_a_transaction():
    with pytest.raises(OutsideTransactionError):
        publish(event_type="test.thing.happened", payload={}, aggregate_type="thing", aggregate_id="1")
    assert OutboxMessage.objects.count() == 0


@transactional
def test_two_relays_publish_every_row_exactly_once_and_never_skip_a_late_commit(processes, capture, quiet_broker):
    captured = capture("test.#")
    late = LateTransaction()
    late.start()
    assert late.written.wait(10)
    message_ids = publish_things(3000)
    assert not OutboxMessage.objects.filter(event_id=late.message_id).exists()  # invisible until it commits

    relays = [processes.start("relay", "run_outbox_relay", "--batch-size", "100") for _ in range(2)]
    wait_until(lambda: unpublished() == 0, timeout=120, message="3000 rows published")
    # The late row took its id and created_at before the 3000 rows; a cursor over ids would skip it.
    late.release.set()
    late.join(10)
    late_row = OutboxMessage.objects.get(event_id=late.message_id)
    assert late_row.pk < OutboxMessage.objects.get(event_id=message_ids[0]).pk
    wait_until(lambda: unpublished() == 0, timeout=30, message="the late row published")
    assert [processes.stop(relay) for relay in relays] == [0, 0]

    received = [message_id for message_id, _, _ in captured.drain()]
    assert len(received) == 3001
    assert sorted(received) == sorted([*message_ids, late.message_id])
    assert OutboxMessage.objects.filter(published_at__isnull=False).count() == 3001


@transactional
def test_one_relay_process_with_three_pipelines_publishes_every_row_once(processes, capture, quiet_broker):
    captured = capture("test.#")
    message_ids = publish_things(2000)

    relay = processes.start("relay", "run_outbox_relay", "--batch-size", "50", "--pipelines", "3")
    wait_until(lambda: unpublished() == 0, timeout=120, message="2000 rows published")
    # Three loops, each on a connection of its own that LISTENs for new rows.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'outbox_relay'"
        )
        assert cursor.fetchone()[0] == 3
    assert processes.stop(relay) == 0

    received = [message_id for message_id, _, _ in captured.drain()]
    assert sorted(received) == sorted(message_ids)


@transactional
def test_an_unroutable_message_is_not_marked_published_and_is_parked_after_its_attempts(settings, capture):
    exchange = f"test_unroutable_{uuid.uuid4().hex[:8]}"
    with broker_support.connection() as conn:
        test_exchange = Exchange(exchange, type="topic", durable=True)(conn.default_channel)
        test_exchange.declare()
        captured = capture("test.routable", exchange=exchange)
        settings.MESSAGING = {**settings.MESSAGING, "EXCHANGE": exchange, "RELAY_MAX_ATTEMPTS": 2}
        [routable] = publish_things(1, "test.routable")
        [unroutable] = publish_things(1, "test.nobody.listens")
        relay = OutboxRelay(declare_topology=False)
        try:
            relay._ensure_broker()
            assert relay.relay_batch() == 2
            row = OutboxMessage.objects.get(event_id=unroutable)
            assert row.published_at is None
            assert row.attempts == 1
            assert "returned by the broker" in row.last_error and "NO_ROUTE" in row.last_error
            assert row.next_attempt_at > timezone.now()
            assert OutboxMessage.objects.get(event_id=routable).published_at is not None
            assert [m for m, _, _ in captured.drain()] == [routable]

            assert relay.relay_batch() == 0  # not before its next attempt time
            OutboxMessage.objects.filter(pk=row.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
            assert relay.relay_batch() == 1
            row.refresh_from_db()
            assert (row.attempts, row.published_at) == (2, None)
            assert row.parked_at is not None
            assert relay.relay_batch() == 0  # parked rows wait for an operator
        finally:
            relay._reset_broker()
            captured.delete()
            test_exchange.delete()


@transactional
def test_a_relay_killed_between_confirm_and_commit_republishes_without_a_second_effect(
    processes, capture, quiet_broker, tmp_path
):
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("10.00"), available=5, version=1)
    order = order_place(customer_id="c", lines=[Line("WIDGET", 2)], payment_token="tok_visa")
    created = OutboxMessage.objects.get(event_type="orders.order.created")
    captured = capture("orders.order.created")
    marker = tmp_path / "relay-paused"

    doomed = processes.start(
        "relay", "run_outbox_relay", env={"FAULT_POINT": "relay.after_confirm", "FAULT_MARKER": str(marker)}
    )
    wait_until(marker.exists, timeout=30, message="the relay to reach the point after the confirms")
    assert captured.count() == 1  # the broker has it and confirmed it...
    processes.kill(doomed)
    created.refresh_from_db()
    assert created.published_at is None  # ...but the commit never happened

    relay = processes.start("relay", "run_outbox_relay")
    wait_until(lambda: unpublished() == 0, timeout=30, message="the row published again")
    processes.stop(relay)
    assert captured.count() == 2  # delivered twice, same message id
    assert {m for m, _, _ in captured.drain()} == {str(created.event_id)}

    result = processes.run("run_consumers", "payments", "events", "--once")
    assert result.returncode == 0, result.stderr
    assert "duplicate" in result.stderr
    succeeded = OutboxMessage.objects.filter(event_type="payments.payment.succeeded")
    wait_until(succeeded.exists, timeout=30, message="the gateway worker's charge recorded")
    charges = [op for op in gateway.ledger(order_id=str(order.id)) if op.kind == "charge"]
    assert len(charges) == 1 and charges[0].amount == Decimal("20.00")
    assert InboxMessage.objects.filter(consumer="payments", message_id=str(created.event_id)).count() == 1
    assert EventLogEntry.objects.filter(message_id=str(created.event_id)).count() == 1
    assert OutboxMessage.objects.filter(event_type="payments.payment.succeeded").count() == 1
