"""Poison messages of every kind injected among valid orders: dead letters, and nothing blocked."""

from collections import Counter

import pytest
from reliable_messaging.models import DeadLetter

from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import check_invariants
from faultlib.load import INITIAL_STOCK
from faultlib.scenarios import POISON_KINDS, poison
from tests.support import fault_fixtures

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
process_env, rng = fault_fixtures.process_env, fault_fixtures.rng


def test_poison_of_every_kind_among_valid_orders_becomes_dead_letters_with_their_reasons(processes, quiet_broker, rng):
    # given a message RabbitMQ dead-lettered past its delivery limit, and the saga under a load of orders
    # when one poison message of each kind is injected at random moments of the load
    outcome = poison(processes, rng, copies=1, max_orders=300)
    print(outcome.load.summary(), *outcome.injected(), sep="\n")  # shown when the test fails

    # then each poison is a dead letter with its reason (and nothing else is), the valid orders all
    # completed behind them, and the invariants hold
    assert len(outcome.expected_dead_letters) == len(POISON_KINDS) + 1 == 11
    assert outcome.exit_codes == [0, 0, 0]
    report = check_invariants(initial_stock=INITIAL_STOCK, expected_dead_letters=outcome.expected_dead_letters)
    assert report.violations == [], str(report)
    assert Counter(DeadLetter.objects.values_list("reason", flat=True)) == {
        "undecodable_body": 2,
        "missing_message_id": 1,
        "missing_event_type": 1,
        "invalid_schema_version": 1,
        "unknown_event_type": 1,
        "unsupported_schema_version": 1,
        "invalid_payload": 2,
        "handler_error": 1,
        "broker_delivery_limit": 1,
    }
    # The bug that raised on every attempt was retried through the delay queues first.
    assert DeadLetter.objects.get(reason="handler_error").attempts == 5
