"""Broker connections cut and database backends terminated mid-load: every process recovers.

Only the test's own resources are touched: the connections of its RabbitMQ vhost and the
PostgreSQL backends its processes opened (``make test`` shares both servers).
"""

import pytest

from faultlib.faults import close_broker_connections
from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import check_invariants, wait_quiet
from faultlib.load import CATALOG, INITIAL_STOCK, OrderLoad
from faultlib.processes import wait_until
from faultlib.saga import seed_catalog
from faultlib.scenarios import FAST_RETRIES, connection_cuts
from orders.models import Order
from tests.support import fault_fixtures

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
process_env, rng = fault_fixtures.process_env, fault_fixtures.rng


def test_cut_broker_and_database_connections_lose_nothing_and_double_nothing(processes, quiet_broker, rng):
    # given a relay, two consumer processes and the deadline loop under a load of orders
    # when the vhost's broker connections are cut 3 times and the processes' backends terminated 3 times
    outcome = connection_cuts(processes, rng, broker_cuts=3, database_cuts=3, max_orders=300)
    print(outcome.load.summary(), *outcome.injected(), sep="\n")  # shown when the test fails

    # then each cut reached live connections, every process reconnected by itself, and the invariants hold
    assert len(outcome.injections) == 6
    assert all(" 0 " not in i.description for i in outcome.injections), "\n".join(outcome.injected())
    assert outcome.exit_codes == [0, 0, 0, 0]
    report = check_invariants(initial_stock=INITIAL_STOCK)
    assert report.violations == [], str(report)


def test_an_idle_relay_whose_broker_connection_is_cut_reconnects_by_itself(processes, quiet_broker, rng):
    # given a relay idle between polls, with the consumers running
    relay = processes.start("relay", "run_outbox_relay")
    processes.start("consumers", "run_consumers", env=FAST_RETRIES)
    seed_catalog(catalog=CATALOG)
    wait_quiet(timeout=30)
    relay_log = processes.procs[0][2].read_text

    connected = relay_log().count("relay connected to the broker")
    assert connected >= 1, relay_log()

    # when the vhost's broker connections are cut while it waits for rows
    close_broker_connections()

    # then it notices while still idle and connects again, every pipeline of it
    wait_until(
        lambda: relay_log().count("relay connected to the broker") == 2 * connected,
        timeout=30,
        message="the idle relay to reconnect by itself",
    )

    # and it is still running and publishes the next order
    assert relay.poll() is None, processes.logs()
    load = OrderLoad(rng)
    load.place(token="tok_visa")
    wait_quiet(timeout=60)
    assert Order.objects.get().status == Order.Status.CONFIRMED
