"""The orchestrated saga through the API, a real relay and real consumers on PostgreSQL and
RabbitMQ, the orchestrator in a process of its own: every outcome, both styles side by side, and
the orchestrator SIGKILLed between steps."""

import random
import time
from decimal import Decimal

import pytest
from django.test import Client

from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import check_invariants, wait_quiet
from faultlib.processes import wait_until
from faultlib.saga import CATALOG, checkout, ledger, seed_catalog, stock, wait_terminal
from orchestrator.models import OrderSaga
from orchestrator.services import Status
from orders.models import Order
from tests.orchestration.test_orchestrator import CONFIRMED_EVENTS

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

S = Status
WIDGET_STOCK = dict((sku, units) for sku, _, _, units in CATALOG)["WIDGET"]


@pytest.fixture
def orchestrated(processes, quiet_broker, settings):
    """Checkout here places orchestrated orders; relay and consumers run, the orchestrator apart."""
    settings.SAGA_STYLE = "orchestration"
    processes.start("relay", "run_outbox_relay")
    processes.start("consumers", "run_consumers", "--except", "orchestrator")
    seed_catalog()
    return processes


def outcome(order_id: str) -> tuple[str, str | None, str]:
    order = Order.objects.get(pk=order_id)
    return order.status, order.failure_reason, order.saga_style


def test_every_outcome_of_both_styles_in_one_system(orchestrated, settings):
    orchestrated.start("orchestrator", "run_consumers", "orchestrator")
    client = Client()
    confirmed = checkout(client, [{"sku": "WIDGET", "quantity": 2}])["id"]
    declined = checkout(client, [{"sku": "WIDGET", "quantity": 1}], token="tok_chargeDeclined")["id"]
    out_of_stock = checkout(client, [{"sku": "RARE", "quantity": 5}, {"sku": "WIDGET", "quantity": 1}])["id"]
    refused = checkout(client, [{"sku": "WIDGET", "quantity": 3}], ship_to="AQ")["id"]
    settings.SAGA_STYLE = "choreography"  # changed while the others are in flight: they finish as they began
    choreographed = checkout(client, [{"sku": "WIDGET", "quantity": 4}])["id"]

    wait_terminal([confirmed, declined, out_of_stock, refused, choreographed], timeout=90)
    wait_quiet(timeout=90, what="the saga's last messages")

    assert outcome(confirmed) == ("CONFIRMED", None, "orchestration")
    assert outcome(declined) == ("FAILED", "payment_declined", "orchestration")
    assert outcome(out_of_stock) == ("FAILED", "out_of_stock", "orchestration")
    assert outcome(refused) == ("FAILED", "shipping_refused", "orchestration")
    assert outcome(choreographed) == ("CONFIRMED", None, "choreography")
    assert ledger(confirmed) == [("charge", Decimal("39.98"))]
    assert ledger(declined) == ledger(out_of_stock) == []
    assert ledger(refused) == [("charge", Decimal("59.97")), ("refund", Decimal("59.97"))]
    assert ledger(choreographed) == [("charge", Decimal("79.96"))]
    assert stock("WIDGET") == WIDGET_STOCK - 2 - 4
    assert stock("RARE") == 3
    assert {o: OrderSaga.objects.get(key=o).state for o in (confirmed, declined, out_of_stock, refused)} == {
        confirmed: S.COMPLETED,
        declined: S.FAILED,
        out_of_stock: S.FAILED,
        refused: S.FAILED,
    }
    assert not OrderSaga.objects.filter(key=choreographed).exists()

    body = client.get(f"/api/orders/{confirmed}/").json()
    assert (body["saga_style"], body["ship_to"]) == ("orchestration", None)
    assert [e["event_type"] for e in body["timeline"]] == CONFIRMED_EVENTS
    report = check_invariants(initial_stock={sku: units for sku, _, _, units in CATALOG})
    assert report.violations == [], str(report)


def test_the_orchestrator_killed_between_any_two_steps_leaves_every_order_with_one_charge(orchestrated, tmp_path):
    client = Client()
    tokens = ["tok_visa"] * 16 + ["tok_chargeDeclined"] * 2
    orders = {checkout(client, [{"sku": "WIDGET", "quantity": 1}], token=t)["id"]: (t, "") for t in tokens}
    orders |= {checkout(client, [{"sku": "WIDGET", "quantity": 1}], ship_to="AQ")["id"]: ("tok_visa", "AQ")}
    orders |= {checkout(client, [{"sku": "RARE", "quantity": 4}])["id"]: ("tok_visa", "")}

    # killed with a message handled but not committed, then committed but not acknowledged
    for point in ("consumer.orchestrator.before_commit", "consumer.orchestrator.before_ack"):
        marker = tmp_path / f"{point}.pid"
        fault = {"FAULT_POINT": point, "FAULT_MARKER": str(marker), "CONSUMER_PREFETCH": "1"}
        process = orchestrated.start(point, "run_consumers", "orchestrator", env=fault)
        wait_until(marker.exists, timeout=60, message=f"the orchestrator at {point}")
        orchestrated.kill(process)
    # then at random moments, a bounded number of times
    rng = random.Random(20261126)
    for attempt in range(4):
        process = orchestrated.start(f"orchestrator-{attempt}", "run_consumers", "orchestrator")
        time.sleep(rng.uniform(1.0, 2.5))
        orchestrated.kill(process)
    orchestrated.start("orchestrator", "run_consumers", "orchestrator")

    wait_terminal(list(orders), timeout=120)
    wait_quiet(timeout=120, what="the saga's last messages")
    expected = {}
    for order_id, (token, ship_to) in orders.items():
        if Order.objects.get(pk=order_id).lines.get().sku == "RARE":
            expected[order_id] = ("FAILED", "out_of_stock", [])
        elif token == "tok_chargeDeclined":
            expected[order_id] = ("FAILED", "payment_declined", [])
        elif ship_to == "AQ":
            expected[order_id] = (
                "FAILED",
                "shipping_refused",
                [("charge", Decimal("19.99")), ("refund", Decimal("19.99"))],
            )
        else:
            expected[order_id] = ("CONFIRMED", None, [("charge", Decimal("19.99"))])
    actual = {o: (*outcome(o)[:2], ledger(o)) for o in orders}
    assert actual == expected
    assert stock("WIDGET") == WIDGET_STOCK - 16
    report = check_invariants(initial_stock={sku: units for sku, _, _, units in CATALOG})
    assert report.violations == [], str(report)
