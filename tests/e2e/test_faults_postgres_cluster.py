"""The saga on a three-member PostgreSQL cluster of the test's own (Patroni, synchronous
replication): the primary is SIGKILLed mid-saga; nobody restarts a process by hand.

``make chaos`` runs the long version (scenario ``postgres``: then the new primary frozen past the TTL).
"""

from datetime import datetime

import pytest

from faultlib.cluster import saga_durations
from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import check_invariants
from faultlib.load import INITIAL_STOCK
from faultlib.postgres import on_the_cluster, outage_lines, own_pg_cluster, primary_loss
from orders.models import Order
from tests.support import fault_fixtures

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
process_env, rng = fault_fixtures.process_env, fault_fixtures.rng


def test_the_saga_survives_the_loss_of_the_primary(processes, rng):
    with own_pg_cluster() as cluster, on_the_cluster(cluster, processes):
        outcome = primary_loss(processes, rng, cluster, orders=60, kill_after=30)
        print(outcome.load.summary(), *outcome.injected(), *outage_lines(outcome), *saga_durations(outcome), sep="\n")

        # the primary died with sagas in flight; every process stayed up and stopped cleanly
        assert outcome.in_flight > 0
        assert outcome.exit_codes == [0, 0, 0]
        # the relay's two pipelines LISTENed at the start, and again on new connections after the kill
        listening = [
            (datetime.fromisoformat(line["timestamp"]).timestamp() > outcome.killed_at, line["backend_pid"])
            for line in processes.log_lines(processes.procs[0][1])
            if line.get("event") == "relay listening for new outbox rows"
        ]
        assert [after for after, _ in listening][:2] == [False, False], listening
        assert len(listening) >= 4 and all(after for after, _ in listening[2:]), listening
        # meanwhile the web answered 503 with Retry-After, and placed orders again by itself
        [(_, outage)] = outcome.outages
        assert set(outage.statuses[:-1]) == {503} and outage.statuses[-1] == 201
        assert outage.without_retry_after == 0
        # every order confirmed, charged once, stock exact, nothing lost or doubled, queues empty
        assert Order.objects.filter(status=Order.Status.CONFIRMED).count() == len(outcome.load.orders) == 60
        report = check_invariants(initial_stock=INITIAL_STOCK)
        assert report.violations == [], str(report)
