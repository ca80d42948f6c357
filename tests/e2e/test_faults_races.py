"""Cancellations fired at random moments of running sagas, and orders passing their deadline mid-saga."""

import pytest
from reliable_messaging._declarations import installed

from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import check_invariants
from faultlib.load import INITIAL_STOCK
from faultlib.scenarios import races
from orders.models import Order
from tests.support import fault_fixtures

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
process_env, rng = fault_fixtures.process_env, fault_fixtures.rng


def test_random_cancellations_and_deadlines_mid_saga_keep_every_invariant(processes, quiet_broker, rng):
    # given one consumer process per context and the deadline loop (2 s) under a load of orders,
    # a third of them cancelled at a random moment, some with a gateway that never answers
    # when one context's consumer is down past the deadline, three times
    outcome = races(processes, rng, pauses=3, saga_timeout=2.0, cancel_share=0.33, max_orders=300)
    print(outcome.load.summary(), *outcome.injected(), sep="\n")  # shown when the test fails

    # then every cancellation and deadline compensated exactly once, and the invariants hold
    assert len(outcome.injections) == 3
    # the relay, one consumer process per context (orders with the event log), the deadline loop
    assert outcome.exit_codes == [0] * (len(installed()) + 2)
    report = check_invariants(
        initial_stock=INITIAL_STOCK,
        cancelled=outcome.load.cancelled,
        tolerated_dead_letter=outcome.tolerated_dead_letter,
    )
    assert report.violations == [], str(report)
    # The deadline struck mid-saga, and cancellations raced the sagas both ways.
    assert Order.objects.filter(failure_reason="timeout").count() >= 3
    assert len(outcome.load.cancelled) >= 1 and outcome.load.cancel_refused >= 1
