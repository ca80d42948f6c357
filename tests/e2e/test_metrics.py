"""Prometheus metrics: the web's /metrics (database gauges, token guard), the shop's counters on the
consumers' and the deadline loop's ports. The relay's and consumers' own counters on their ports
are the bus's test: packages/django-reliable-messaging/tests/test_metrics_ports.py."""

import urllib.request
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging._topology import consumers
from reliable_messaging.models import DeadLetter, OutboxMessage

from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import free_port, wait_until
from faultlib.saga import checkout, seed_catalog, wait_terminal
from tests.support.waits import read_until

OLDEST = "messaging_dead_letter_oldest_waiting_age_seconds"


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample as ``{(name, sorted labels): value}``."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def outbox_row(**fields) -> OutboxMessage:
    order_id = str(uuid.uuid4())
    return OutboxMessage.objects.create(
        source="orders",
        event_type="orders.order.created",
        aggregate_type="order",
        aggregate_id=order_id,
        correlation_id=order_id,
        payload={},
        **fields,
    )


@pytest.mark.django_db
def test_metrics_reads_backlog_dead_letters_and_pending_orders_from_the_database():
    from orders.models import Order  # the context's own: the file collects without it

    now = timezone.now()
    outbox_row(created_at=now - timedelta(seconds=90))
    outbox_row()
    outbox_row(parked_at=now)
    outbox_row(published_at=now)
    dead_letter_record(
        consumer="payments", body=b"{}", properties={"message_id": "m"}, headers={}, routing_key="", reason="x"
    )
    Order.objects.create(customer_id="c", total=Decimal("1.00"), currency="USD")
    Order.objects.filter(pk=Order.objects.create(customer_id="c", total=Decimal("1.00"), currency="USD").pk).update(
        created_at=now - timedelta(minutes=5)
    )

    response = Client().get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    got = samples(response.content.decode())
    assert got[("shop_database_up", ())] == 1
    assert got[("messaging_outbox_pending", ())] == 2
    assert 90 <= got[("messaging_outbox_oldest_pending_age_seconds", ())] < 120
    assert got[("messaging_outbox_parked", ())] == 1
    assert {labels: value for (name, labels), value in got.items() if name == "messaging_dead_letters"} == {
        (("consumer", consumer), ("state", state)): (1 if (consumer, state) == ("payments", "waiting") else 0)
        for consumer in consumers()
        for state in ("waiting", "replayed")
    }
    assert (got[("orders_pending", ())], got[("orders_pending_stuck", ())]) == (2, 1)
    assert 300 <= got[("orders_oldest_pending_age_seconds", ())] < 330
    assert got[("orders_saga_timeout_seconds", ())] == 300  # the alert's deadline, as configured
    # The saga outcome metrics are registered in the web process too (cancellations happen here).
    names = {family.name for family in text_string_to_metric_families(response.content.decode())}
    assert {"orders_saga_outcomes", "orders_checkout_to_terminal_seconds"} <= names


@pytest.mark.django_db
def test_metrics_says_whether_the_gateway_worker_keeps_up():
    from payments.models import Payment  # the context's own: the file collects without it

    now = timezone.now()
    status = Payment.Status

    def payment(state, due_in: float | None):
        due = now + timedelta(seconds=due_in) if due_in is not None else None
        Payment.objects.create(order_id=uuid.uuid4(), status=state, amount=Decimal("1.00"), call_due_at=due)

    assert samples(Client().get("/metrics").content.decode())[("payments_gateway_call_oldest_overdue_seconds", ())] == 0
    payment(status.CHARGING, -120)  # due two minutes ago, taken by no worker
    payment(status.CHARGING, 20)  # claimed: its lease runs 20 s more
    payment(status.REFUNDING, -5)
    payment(status.CHARGED, None)
    payment(status.DECLINED, None)
    Payment.objects.filter(status=status.REFUNDING).update(call_error="the gateway refused the call (400)")

    got = samples(Client().get("/metrics").content.decode())
    assert got[("payments_gateway_calls_failing", ())] == 1  # its last try failed: call_error says why

    in_flight = {labels: value for (name, labels), value in got.items() if name == "payments_gateway_calls_in_flight"}
    assert in_flight == {(("kind", "charge"),): 2, (("kind", "refund"),): 1}
    assert 120 <= got[("payments_gateway_call_oldest_overdue_seconds", ())] < 150


@pytest.mark.django_db
def test_metrics_token_is_required_when_set(settings):
    settings.METRICS_TOKEN = "s3cret"
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    refused = Client().get("/metrics", headers={"Authorization": "s3cret"})
    assert (refused.status_code, refused["WWW-Authenticate"]) == (401, "Bearer")
    assert Client().get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return samples(response.read().decode())


def scrape_when_up(port: int) -> dict[tuple[str, tuple], float]:
    try:
        return scrape(port)
    except OSError:  # the process is still starting
        return {}


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_the_consumers_count_the_saga_outcomes_they_decide(processes, quiet_broker):
    consumers_port = free_port()
    processes.start("relay", "run_outbox_relay")
    processes.start("consumers", "run_consumers", "--metrics-port", str(consumers_port))
    seed_catalog()

    order = checkout(Client(), [{"sku": "WIDGET", "quantity": 1}])
    wait_terminal([order["id"]])
    # The orders consumer counts the outcome (then its latency) once its transaction has committed,
    # after the order can be seen CONFIRMED here: wait for both.
    confirmed = ("orders_saga_outcomes_total", (("reason", "none"), ("status", "CONFIRMED")))
    latency = ("orders_checkout_to_terminal_seconds_count", (("status", "CONFIRMED"),))
    consumers = read_until(
        lambda: scrape(consumers_port),
        lambda got: got.get(confirmed, 0) >= 1 and got.get(latency, 0) >= 1,
        timeout=10,
        what="the outcome counted",
    )
    # The orders consumer decided the outcome, so it counted it.
    assert consumers[confirmed] == 1
    assert consumers[latency] == 1


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_the_deadline_loop_counts_the_timeouts_it_decides(processes):
    from orders.models import Order  # the context's own: the file collects without it

    order = Order.objects.create(customer_id="c", total=Decimal("1.00"), currency="USD")
    Order.objects.filter(pk=order.pk).update(created_at=timezone.now() - timedelta(minutes=10))
    port = free_port()

    processes.start("deadline", "expire_pending_orders", "--loop", "--metrics-port", str(port))
    timeouts = ("orders_saga_outcomes_total", (("reason", "timeout"), ("status", "FAILED")))
    wait_until(lambda: scrape_when_up(port).get(timeouts) == 1, timeout=20, message="the timeout to be counted")

    got = scrape(port)
    assert Order.objects.get(pk=order.pk).failure_reason == "timeout"
    assert got[("orders_checkout_to_terminal_seconds_count", (("status", "FAILED"),))] == 1
    assert got[("orders_checkout_to_terminal_seconds_bucket", (("le", "600.0"), ("status", "FAILED")))] == 0
    assert got[("orders_checkout_to_terminal_seconds_bucket", (("le", "1800.0"), ("status", "FAILED")))] == 1


@pytest.mark.django_db
def test_metrics_give_each_consumers_oldest_waiting_dead_letter_with_its_reason_and_no_id():
    def letter(consumer: str, message_id: str, order_id: str, reason: str, failed_minutes_ago: int, replayed=False):
        record = dead_letter_record(
            consumer=consumer,
            body=b"{}",
            properties={"message_id": message_id, "correlation_id": order_id},
            headers={},
            routing_key="",
            reason=reason,
        )
        DeadLetter.objects.filter(pk=record.pk).update(
            last_failed_at=timezone.now() - timedelta(minutes=failed_minutes_ago),
            replayed_at=timezone.now() if replayed else None,
        )

    letter("payments", "m-new", "order-new", "handler_error", 1)
    letter("payments", "m-old", "order-old", "invalid_payload", 7)
    letter("payments", "m-replayed", "order-replayed", "handler_error", 60, replayed=True)
    letter("inventory", "m-inv", "order-inv", "unknown_event_type", 2)

    got = samples(Client().get("/metrics").content.decode())

    oldest = {labels: value for (name, labels), value in got.items() if name == OLDEST}
    # No message or correlation id: they lead to the order (dead_letters list names the letter).
    assert set(oldest) == {
        (("consumer", "inventory"), ("reason", "unknown_event_type")),
        (("consumer", "payments"), ("reason", "invalid_payload")),
    }
    ages = sorted(oldest.values())
    assert 120 <= ages[0] < 180 and 420 <= ages[1] < 480, ages
