"""Which node of a cluster's ``BROKER_URL`` a process connects to (the cluster itself: test_faults_cluster)."""

import pytest
from reliable_messaging import _broker as broker
from reliable_messaging._session import BrokerSession

CLOSED_PORT_NODE = "amqp://guest:guest@127.0.0.1:1/"


@pytest.fixture(autouse=True)
def no_failed_nodes(monkeypatch):
    monkeypatch.setattr(broker, "_failed_at", {})


def test_the_first_node_that_answers_is_used_and_one_that_failed_is_tried_last(settings):
    live = settings.BROKER_URL
    refused = CLOSED_PORT_NODE + live.rsplit("/", 1)[1]
    settings.MESSAGING = {**settings.MESSAGING, "BROKER_URL": f"{refused};{live}"}
    session = BrokerSession(declare_topology=False)

    connection = session.open()  # node 1 refuses: node 2
    assert connection.connected and connection.port == 5672
    session.close()

    settings.MESSAGING = {**settings.MESSAGING, "BROKER_URL": f"{live};{refused}"}
    assert broker.node_urls() == [live, refused]  # as configured
    assert session.open().port == 5672
    session.drop()  # as after a failure of its node
    assert broker.node_urls() == [refused, live]  # the node just lost goes last
