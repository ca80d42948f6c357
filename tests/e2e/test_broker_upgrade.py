"""Upgrading a live broker set up by the previous release (83b4deb: classic dead-letter and delay queues).

The previous release's own code declares its topology on a vhost of the test's own, messages
wait in its classic queues, then this release declares its quorum topology beside it (no 406)
and ``upgrade_broker_queues`` moves the messages over and deletes the old queues.
"""

import io
import os
import subprocess
import sys
import uuid

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from kombu import Connection
from reliable_messaging import _broker as broker
from reliable_messaging._queue_upgrade import legacy_queues
from reliable_messaging._topology import consumers

from faultlib.faults import rabbitmqctl
from faultlib.processes import BASE_DIR

PREVIOUS_RELEASE = "83b4deb"


@pytest.fixture
def vhost_url():
    vhost = f"{os.environ['TEST_BROKER_VHOST']}_upgrade_{uuid.uuid4().hex[:6]}"
    rabbitmqctl("add_vhost", vhost)
    rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    try:
        url = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
        with override_settings(MESSAGING={**settings.MESSAGING, "BROKER_URL": url}):
            yield url
    finally:
        rabbitmqctl("delete_vhost", vhost)


def previous_release_declares_its_topology(url: str, tmp_path) -> None:
    tree = tmp_path / "previous"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", PREVIOUS_RELEASE], cwd=BASE_DIR, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    # The previous release's own bus (its messaging/ folder), not the installed package.
    script = (
        "import django; django.setup()\n"
        "from messaging.broker import connect, declare_topology\n"
        "c = connect(); c.connect(); declare_topology(c); c.release()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"BROKER_URL": url, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "config.settings"}
    subprocess.run([sys.executable, "-c", script], cwd=tree, env=env, check=True, timeout=60)


def queues(url: str) -> dict[str, tuple[str, int]]:
    """Every queue of the vhost: its type and how many messages it holds."""
    vhost = url.rsplit("/", 1)[1]
    lines = rabbitmqctl("list_queues", "-p", vhost, "--no-table-headers", "name", "type", "messages").splitlines()
    return {name: (kind, int(depth)) for name, kind, depth in (line.split("\t") for line in lines)}


def put(url: str, queue: str, message_id: str) -> None:
    with Connection(url, transport_options={"confirm_publish": True}) as conn:
        conn.Producer().publish(
            b'{"order_id": "x"}', exchange="", routing_key=queue, message_id=message_id,
            headers={"event_type": "orders.order.created", "x-death": [{"reason": "delivery_limit"}]},
            content_type="application/json", delivery_mode=2,
        )  # fmt: skip


def take_all(url: str, queue: str) -> list[tuple[str, dict]]:
    taken = []
    with Connection(url) as conn:
        channel = conn.channel()
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            taken.append((message.properties["message_id"], message.properties["application_headers"]))
    return taken


def test_a_broker_of_the_previous_release_is_upgraded_live_without_losing_a_message(vhost_url, tmp_path):
    previous_release_declares_its_topology(vhost_url, tmp_path)
    before = queues(vhost_url)
    assert before["payments_queue_dlq"] == ("classic", 0)
    assert before["orders_queue_retry_30000ms"] == ("classic", 0)
    put(vhost_url, "payments_queue_dlq", "dead-1")
    put(vhost_url, "orders_queue_retry_30000ms", "delayed-1")

    # This release starts beside it on the same broker: its own quorum queues, no 406.
    with Connection(vhost_url) as conn:
        conn.connect()
        broker.declare_topology(conn)
        broker.declare_topology(conn)  # idempotent
    assert queues(vhost_url)["payments_queue_dlq"] == ("classic", 1)  # still there meanwhile

    out = io.StringIO()
    call_command("upgrade_broker_queues", stdout=out)

    assert "payments_queue_dlq: 1 message(s) moved, queue deleted" in out.getvalue()
    assert "orders_queue_retry_30000ms: 1 message(s) moved, queue deleted" in out.getvalue()
    # Taken at once: the 30 s delay starts again in the new queue.
    assert [mid for mid, _ in take_all(vhost_url, "orders_queue_delay_30000ms")] == ["delayed-1"]
    after = queues(vhost_url)
    assert {old for old, _ in legacy_queues()} & set(after) == set()
    assert {name: kind for name, (kind, _) in after.items()} == {
        queue.name: "quorum"
        for consumer in consumers()
        for queue in [broker.dead_letter_queue(consumer), broker.main_queue(consumer), *broker.retry_queues(consumer)]
    }
    assert take_all(vhost_url, "payments_queue_dead_letters") == [
        (
            "dead-1",
            {"event_type": "orders.order.created", "x-death": [{"reason": "delivery_limit"}], "x-delivery-count": 0},
        )  # the quorum queue counts deliveries
    ]

    # The dead-letter exchange now feeds the new queue only.
    with Connection(vhost_url, transport_options={"confirm_publish": True}) as conn:
        conn.Producer().publish(b"{}", exchange="payments_queue_dlx", routing_key="", message_id="dead-2")
    assert [mid for mid, _ in take_all(vhost_url, "payments_queue_dead_letters")] == ["dead-2"]

    again = io.StringIO()
    call_command("upgrade_broker_queues", stdout=again)
    assert again.getvalue() == "nothing to upgrade: no queue of the previous release is left\n"


def test_a_queue_the_previous_release_still_consumes_is_left_alone(vhost_url, tmp_path):
    previous_release_declares_its_topology(vhost_url, tmp_path)
    put(vhost_url, "inventory_queue_dlq", "dead-1")
    with Connection(vhost_url) as conn:
        channel = conn.channel()
        channel.basic_qos(0, 1, False)
        channel.basic_consume("inventory_queue_dlq", callback=lambda m: None)  # a process of the previous release
        with pytest.raises(CommandError, match=r"inventory_queue_dlq \(1 consumer\(s\)\)"):
            call_command("upgrade_broker_queues", stdout=io.StringIO())
        left = queues(vhost_url)
        assert left["inventory_queue_dlq"] == ("classic", 1)
        assert "payments_queue_dlq" not in left  # the others were upgraded
