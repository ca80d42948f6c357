"""The saga on a three-node RabbitMQ cluster of the test's own: the node every process is
connected to is SIGKILLed mid-saga and started again; nobody restarts a process by hand.

``make chaos`` runs the long version (scenario ``cluster``).
"""

import pytest
from reliable_messaging._broker import DELAY_LADDER
from reliable_messaging._topology import consumers

from faultlib.cluster import connected_ports, node_loss, observed_on, own_cluster, saga_durations
from faultlib.fixtures import ALL_DATABASES
from faultlib.invariants import check_invariants
from faultlib.load import INITIAL_STOCK
from orders.models import Order
from tests.support import fault_fixtures

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
process_env, rng = fault_fixtures.process_env, fault_fixtures.rng


@pytest.fixture
def cluster():
    with own_cluster() as (cluster, vhost):
        with observed_on(cluster, vhost):
            yield cluster, vhost


def test_the_saga_survives_the_loss_of_the_node_its_processes_are_connected_to(processes, cluster, rng):
    cluster, vhost = cluster
    processes.env = {**processes.env, "BROKER_URL": cluster.url(vhost)}

    outcome = node_loss(processes, rng, cluster, orders=60, kill_after=20, down_for=5)
    print(outcome.load.summary(), *outcome.injected(), *saga_durations(outcome), sep="\n")  # shown when the test fails

    # every process stayed up, moved to another node by itself, and stopped cleanly
    assert outcome.exit_codes == [0, 0, 0]
    first, others = cluster.node(1).port, {cluster.node(2).port, cluster.node(3).port}
    relay, *consumer_processes = connected_ports(processes)
    assert relay[:2] == [first, first] and set(relay[2:4]) <= others  # two pipelines: two connections
    assert [ports[0] for ports in consumer_processes] == [first, first]
    assert all(ports[1] in others for ports in consumer_processes)
    # every order confirmed, charged once, stock exact, queues empty
    assert Order.objects.filter(status=Order.Status.CONFIRMED).count() == 60
    report = check_invariants(initial_stock=INITIAL_STOCK)
    assert report.violations == [], str(report)
    # every queue is a quorum queue with a member on each node
    nodes = sorted(n.name for n in cluster.nodes)
    queues = cluster.queues(vhost)
    assert len(queues) == len(consumers()) * (2 + len(DELAY_LADDER))  # per consumer: main, dead letters, the delays
    assert {(q["name"], q["type"], tuple(sorted(q["members"]))) for q in queues} == {
        (q["name"], "quorum", tuple(nodes)) for q in queues
    }
