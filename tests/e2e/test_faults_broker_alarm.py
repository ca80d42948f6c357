"""A broker in a memory alarm blocks the relay's publishes: the relay times out, rolls the
batch back, marks nothing published, and publishes everything once the alarm clears.

The alarm is node-wide, so the broker is a node of the test's own: the machine's would block
every other run sharing it (the bus's tests run beside this suite in ``make test``)."""

import pytest
from reliable_messaging.models import OutboxMessage

from faultlib.broker import CaptureQueue
from faultlib.cluster import own_cluster
from faultlib.faults import memory_alarm
from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import wait_until
from tests.support.outbox import publish_things, unpublished

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


def test_a_blocked_broker_times_the_relay_out_and_nothing_is_marked_published_until_it_confirms(processes):
    with own_cluster(nodes=1) as (broker, vhost):
        url = broker.url(vhost)
        captured = CaptureQueue("test.#", url=url)
        relay = processes.start("relay", "run_outbox_relay", env={"RELAY_CONFIRM_TIMEOUT": "2", "BROKER_URL": url})
        wait_until(lambda: "relay listening" in processes.logs(), timeout=30, message="the relay to start")

        with memory_alarm(broker.nodes[0].name):
            # when rows are written while RabbitMQ blocks every publisher
            message_ids = publish_things(50)
            wait_until(
                lambda: processes.logs().count("ConfirmTimeout") >= 2,
                timeout=60,
                message="the relay to time out twice",
            )
            # then the relay is still running and has marked nothing published
            assert relay.poll() is None, processes.logs()
            assert unpublished() == 50

        # and once the alarm clears, every row is published and reaches the queue
        wait_until(lambda: unpublished() == 0, timeout=60, message="the rows published after the alarm")
        assert processes.stop(relay) == 0
        received = {message_id for message_id, _, _ in captured.drain()}
        assert received == set(message_ids)
        assert OutboxMessage.objects.filter(published_at__isnull=False).count() == 50
