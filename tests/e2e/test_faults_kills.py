"""Processes SIGKILLed mid-load: relays, consumers, the gateway worker, and a payments consumer that dies
before its commit.

Real PostgreSQL, RabbitMQ and processes; the exact invariants are checked once quiet.
"""

from decimal import Decimal

import pytest
from reliable_messaging.models import InboxMessage, OutboxMessage

from fake_gateway.in_process import gateway
from faultlib.faults import backends_waiting_on_a_lock
from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import check_invariants, wait_quiet
from faultlib.load import CATALOG, INITIAL_STOCK
from faultlib.processes import wait_until
from faultlib.saga import seed_catalog
from faultlib.scenarios import (
    FAST_RETRIES,
    RETURN_POINTS,
    batch_kills,
    consumer_kills,
    process_log_events,
    relay_kills,
    return_kills,
)
from orders.models import Order
from orders.services.checkout import Line, order_place
from orders.services.saga import order_cancel
from payments.models import Payment
from tests.support import fault_fixtures

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
process_env, rng = fault_fixtures.process_env, fault_fixtures.rng

DUPLICATE = "duplicate: already handled, acked without effect"


def test_relays_killed_at_random_points_lose_nothing_and_double_nothing(processes, quiet_broker, rng):
    # given two relays and two consumer processes under a load of orders
    # when the relays are SIGKILLed 6 times at random and 3 times between the confirms and the commit
    outcome = relay_kills(processes, rng, random_kills=6, confirm_kills=3, max_orders=300)
    print(outcome.load.summary(), *outcome.injected(), sep="\n")  # shown when the test fails

    # then every fault happened, every process recovered, and the invariants hold
    assert [i.ok for i in outcome.injections] == [True] * 9, "\n".join(outcome.injected())
    assert outcome.exit_codes == [0, 0, 0, 0]
    report = check_invariants(initial_stock=INITIAL_STOCK)
    assert report.violations == [], str(report)
    # A batch confirmed but not committed is published again: the inboxes absorbed it.
    assert process_log_events(processes, DUPLICATE) >= 3


def test_consumers_killed_inside_handlers_and_before_acks_lose_nothing_and_double_nothing(processes, quiet_broker, rng):
    # given a relay, two consumer processes and the gateway worker under a load of orders
    points = [
        "consumer.payments.before_commit",
        "consumer.payments.before_ack",
        "consumer.inventory.before_commit",
        "consumer.inventory.before_ack",
        "consumer.orders.before_ack",
        "gateway_calls.before_call",
        "gateway_calls.after_call",
        "gateway_calls.after_outcome",
    ]
    # when the consumers and the gateway worker are SIGKILLed 6 times at random and once at each of
    # those points
    outcome = consumer_kills(processes, rng, random_kills=6, points=points, max_orders=300)
    print(outcome.load.summary(), *outcome.injected(), sep="\n")  # shown when the test fails

    # then every fault happened, every process recovered, and the invariants hold
    assert [i.ok for i in outcome.injections] == [True] * 14, "\n".join(outcome.injected())
    assert outcome.exit_codes == [0, 0, 0, 0]
    report = check_invariants(initial_stock=INITIAL_STOCK)
    assert report.violations == [], str(report)
    # Each kill after a commit left a handled message unacked: its redelivery was a duplicate.
    assert process_log_events(processes, DUPLICATE) >= 3


@pytest.mark.needs_contexts("shipping")
def test_returns_with_consumers_and_the_gateway_worker_killed_end_returned_once(processes, quiet_broker, rng):
    # given 40 confirmed orders, a relay, two consumer processes and the gateway worker
    # when each order is returned while the consumers and the worker are SIGKILLed 4 times at
    # random and once before each return step's commit and after the refund's gateway call
    outcome = return_kills(processes, rng, random_kills=4, points=RETURN_POINTS, orders=40)
    print(outcome.load.summary(), *outcome.injected(), sep="\n")  # shown when the test fails

    # then every fault happened, every process recovered, every order is RETURNED with its charge
    # refunded once and its stock back, and nothing was lost or done twice
    assert [i.ok for i in outcome.injections] == [True] * 9, "\n".join(outcome.injected())
    assert outcome.exit_codes == [0, 0, 0, 0]
    assert len(outcome.load.returned) == 40
    report = check_invariants(initial_stock=INITIAL_STOCK, returned=outcome.load.returned)
    assert report.violations == [], str(report)
    assert Order.objects.filter(pk__in=outcome.load.returned, status="RETURNED").count() == 40


def test_consumers_killed_inside_a_batch_lose_nothing_and_double_nothing(processes, quiet_broker, rng):
    # given a backlog in payments' and then inventory's queue, taken in batches
    # when each is SIGKILLed inside a batch: between two handlers, and before the batch's commit
    outcome = batch_kills(processes, rng, rounds=4, orders_per_round=8)
    print(outcome.load.summary(), *outcome.injected(), sep="\n")  # shown when the test fails

    # then every fault happened, every process recovered, and the invariants hold: the killed
    # batches' handlers ran (payments recorded charges in flight) but nothing of them committed
    assert [i.ok for i in outcome.injections] == [True] * 4, "\n".join(outcome.injected())
    assert all(
        "between_handlers" in i.description or "before_batch_commit" in i.description for i in outcome.injections
    )
    assert outcome.exit_codes == [0, 0, 0, 0]
    report = check_invariants(initial_stock=INITIAL_STOCK)
    assert report.violations == [], str(report)


def payments_stopped_before_its_commit(processes, tmp_path, line: Line):
    """The saga running, with the payments consumer stopped before its commit, holding the order's
    message and no other (prefetch 1): (the others, it, the order)."""
    running = [
        processes.start("relay", "run_outbox_relay"),
        processes.start("consumers", "run_consumers", "--except", "payments"),
    ]
    seed_catalog(catalog=CATALOG)
    marker = tmp_path / "payments.pid"
    fault = {"FAULT_POINT": "consumer.payments.before_commit", "FAULT_MARKER": str(marker), "CONSUMER_PREFETCH": "1"}
    stopped = processes.start("payments", "run_consumers", "payments", env={**FAST_RETRIES, **fault})
    order = order_place(customer_id="c", lines=[line], payment_token="tok_visa")
    wait_until(marker.exists, timeout=30, message="payments to stop before its commit")
    return running, stopped, order


def test_a_payments_consumer_killed_before_its_commit_leaves_one_charge_to_make(processes, quiet_broker, tmp_path):
    # given the payments consumer stopped before its commit: the charge recorded in flight, not
    # committed, and not made (the handler never calls the gateway)
    running, doomed, order = payments_stopped_before_its_commit(processes, tmp_path, Line("WIDGET", 2))
    assert gateway.ledger(order_id=str(order.id)) == []
    assert not Payment.objects.filter(order_id=order.id).exists()  # its transaction is still open

    # when it is SIGKILLed there and a new payments consumer gets the redelivery
    processes.kill(doomed)
    payments = processes.start("payments", "run_consumers", "payments", env=FAST_RETRIES)
    wait_quiet(timeout=60)

    # then the gateway worker made the one charge, and the order is confirmed on it
    assert Order.objects.get(pk=order.id).status == Order.Status.CONFIRMED
    [charge] = gateway.ledger(order_id=str(order.id))
    assert (charge.kind, charge.amount) == ("charge", Decimal("39.98"))
    payment = Payment.objects.get(order_id=order.id)
    assert (payment.status, payment.charge_id, payment.call_attempts) == (Payment.Status.CHARGED, f"ch_{charge.pk}", 1)
    created = OutboxMessage.objects.get(event_type="orders.order.created")
    assert InboxMessage.objects.filter(consumer="payments", message_id=str(created.event_id)).count() == 1
    assert OutboxMessage.objects.filter(event_type="payments.payment.succeeded").count() == 1
    assert [processes.stop(p) for p in (*running, payments)] == [0, 0, 0]
    report = check_invariants(initial_stock=INITIAL_STOCK)
    assert report.violations == [], str(report)


def test_an_order_cancelled_while_its_charge_was_uncommitted_is_never_charged(processes, quiet_broker, tmp_path):
    # given the payments consumer stopped before committing the order's charge in flight
    running, doomed, order = payments_stopped_before_its_commit(processes, tmp_path, Line("RARE", 1))

    # when the order is cancelled, a second payments consumer takes the cancellation (it waits
    # on the first one's uncommitted payment row), and the first one is SIGKILLed
    order_cancel(order_id=order.id)
    payments = processes.start("payments", "run_consumers", "payments", env=FAST_RETRIES)
    wait_until(lambda: backends_waiting_on_a_lock() == 1, timeout=30, message="the refund to wait on the row lock")
    processes.kill(doomed)
    wait_quiet(timeout=60)

    # then the refund asked the gateway by the charge's key, found nothing and left a tombstone;
    # the redelivered order then charged nothing
    assert Order.objects.get(pk=order.id).status == Order.Status.CANCELLED
    assert gateway.ledger(order_id=str(order.id)) == []
    assert Payment.objects.get(order_id=order.id).status == Payment.Status.VOIDED
    assert OutboxMessage.objects.filter(event_type="payments.payment.succeeded").count() == 0
    assert [processes.stop(p) for p in (*running, payments)] == [0, 0, 0]
    report = check_invariants(initial_stock=INITIAL_STOCK, cancelled=[order.id])
    assert report.violations == [], str(report)
