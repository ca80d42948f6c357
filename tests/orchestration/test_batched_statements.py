"""Both saga styles drained in batches, in-process: each consumer decides every message waiting
for it in one batch (``decide_batch``, as the consumer loop does with a full prefetch), round after
round, and the statements each consumer's batches run are counted. Run handlers and the saga engine
take a batch's messages together, so a batch costs the same statements for 4 orders as for 12: the
orchestrated saga's pace (docs/benchmarks.md, figure 12) comes from that."""

from collections import Counter
from decimal import Decimal

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from reliable_messaging._dispatch import Delivery, Outcome, decide_batch
from reliable_messaging.testing import ATTEMPT_HEADER

from faultlib.fixtures import ALL_DATABASES
from faultlib.simulation import Bus
from faultlib.steps import offered
from inventory.services import product_upsert
from orchestrator.models import OrderSaga
from orders.models import Order
from orders.services.checkout import Line, order_place
from tests.orchestration.test_orchestrator import ORCHESTRATED

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
calls_in_flight, gateway_worker_step = offered("gateway_calls_in_flight"), offered("gateway_worker_step")
CHOREOGRAPHED = override_settings(SAGA_STYLE="choreography")


def drained_in_batches(style, orders: int) -> tuple[Counter, Counter]:
    """``orders`` checkouts in ``style`` drained to the end; per consumer, the statements its
    batches ran and the messages they decided."""
    # A batch goes in correlation-id order, and a run is its consecutive members of one handler:
    # the product's events (its SKU their correlation id) would split the orders' runs wherever
    # the SKU sorted between two order ids. This one sorts after every UUID.
    sku = f"zz-batch-{orders}-{style is ORCHESTRATED}"
    product_upsert(sku=sku, name="Batched", price=Decimal("10.00"), stock=orders)
    bus = Bus({sku})
    bus.relay()
    while bus.pending:  # the storefront learns of the product first
        bus.deliver(0)
    with style:
        placed = [order_place(customer_id="c", lines=[Line(sku, 1)], payment_token="tok_visa") for _ in range(orders)]
    order_ids = [str(order.id) for order in placed]
    bus.scope.update(order_ids)
    statements, decided = Counter(), Counter()
    for _ in range(50):  # rounds: a saga of either style ends in fewer than 15
        bus.relay()
        if not bus.pending:
            if not calls_in_flight(order_ids):
                break
            gateway_worker_step(order_ids)
            continue
        waiting, bus.pending = bus.pending, []
        for consumer in sorted({d.consumer for d in waiting}):
            batch = [
                Delivery(consumer, d.envelope.body, d.envelope.properties, {**d.envelope.headers, ATTEMPT_HEADER: 1},
                         d.envelope.routing_key)
                for d in waiting if d.consumer == consumer
            ]  # fmt: skip
            with CaptureQueriesContext(connection) as queries:
                decisions = decide_batch(batch)
            assert [d.outcome for d in decisions] == [Outcome.HANDLED] * len(batch)
            statements[consumer] += len(queries)
            decided[consumer] += len(batch)
    assert list(Order.objects.filter(pk__in=order_ids).values_list("status", flat=True)) == ["CONFIRMED"] * orders
    return statements, decided


@pytest.mark.parametrize("style", [CHOREOGRAPHED, ORCHESTRATED], ids=["choreography", "orchestration"])
def test_a_batch_costs_the_same_statements_for_4_orders_as_for_12(style):
    few, few_decided = drained_in_batches(style, 4)
    many, many_decided = drained_in_batches(style, 12)

    assert {c: n * 3 for c, n in few_decided.items()} == many_decided  # three times the messages
    assert few == many  # in as many statements, consumer by consumer
    if style is ORCHESTRATED:
        assert OrderSaga.objects.filter(state="completed").count() == 16
        # Every context's consumer takes part: the orchestrator and each participant.
        assert set(many) == {"events", "inventory", "orchestrator", "orders", "payments", "shipping"}
