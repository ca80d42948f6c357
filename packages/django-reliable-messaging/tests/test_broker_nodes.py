"""Which node of a cluster's ``BROKER_URL`` (nodes separated by ``;``) a process connects to: the
first that answers, and a node that just failed is tried last."""

from urllib.parse import urlsplit

import pytest
from reliable_messaging import _broker as broker
from reliable_messaging._session import BrokerSession

from conftest import amqp

pytestmark = pytest.mark.skipif(not amqp(), reason="RabbitMQ's: the embedded broker has one node")
CLOSED_PORT_NODE = "amqp://guest:guest@127.0.0.1:1/"


@pytest.fixture(autouse=True)
def no_failed_nodes(monkeypatch):
    monkeypatch.setattr(broker, "_failed_at", {})


def test_the_first_node_that_answers_is_used_and_one_that_failed_is_tried_last(settings):
    live = settings.MESSAGING["BROKER_URL"]
    port = urlsplit(live).port or 5672
    refused = CLOSED_PORT_NODE + live.rsplit("/", 1)[1]
    settings.MESSAGING = {**settings.MESSAGING, "BROKER_URL": f"{refused};{live}"}
    session = BrokerSession(declare_topology=False)

    connection = session.open()  # node 1 refuses: node 2
    assert connection.connected and connection.port == port
    session.close()

    settings.MESSAGING = {**settings.MESSAGING, "BROKER_URL": f"{live};{refused}"}
    assert broker.node_urls() == [live, refused]  # as configured
    assert session.open().port == port
    session.drop()  # as after a failure of its node
    assert broker.node_urls() == [refused, live]  # the node just lost goes last
