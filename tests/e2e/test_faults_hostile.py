"""Hostile messages of every kind among genuine orders, on the Procfile's two consumer processes:
each a dead letter with its reason, no process stopped, every invariant holds (make chaos runs
the same scenario longer: ``--only hostile``)."""

from collections import Counter

import pytest
from reliable_messaging.models import DeadLetter

from faultlib.fixtures import ALL_DATABASES
from faultlib.hostile import HOSTILE_KINDS, hostile
from faultlib.invariants import check_invariants
from faultlib.load import INITIAL_STOCK
from tests.support import fault_fixtures

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
process_env, rng = fault_fixtures.process_env, fault_fixtures.rng


def test_hostile_messages_among_genuine_orders_become_dead_letters_and_stop_no_process(processes, quiet_broker, rng):
    outcome = hostile(processes, rng, copies=1, max_orders=60)
    print(outcome.load.summary(), *outcome.injected(), sep="\n")  # shown when the test fails

    assert len(outcome.expected_dead_letters) == len(HOSTILE_KINDS) == 13
    assert outcome.exit_codes == [0, 0, 0]  # every process was still running, and stopped cleanly
    report = check_invariants(initial_stock=INITIAL_STOCK, expected_dead_letters=outcome.expected_dead_letters)
    assert report.violations == [], str(report)
    assert Counter(DeadLetter.objects.values_list("reason", flat=True)) == {
        "invalid_headers": 7,
        "invalid_payload": 2,
        "broker_dead_lettered": 2,
        "broker_delivery_limit": 1,
        "message_id_reused": 1,
    }
