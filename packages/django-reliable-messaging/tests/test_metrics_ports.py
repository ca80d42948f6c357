"""The relay and the consumers serve their counters on ports of their own (``--metrics-port``),
counted where the work is done: what the relay published, what each consumer did with each event
type. Real processes on the test's database and broker."""

import socket
import urllib.request

import pytest
from notes.services import write_note
from reliable_messaging.models import OutboxMessage

from conftest import amqp, wait_until

parser = pytest.importorskip("prometheus_client.parser", reason="the extra 'metrics'")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample as ``{(name, sorted labels): value}``; empty while the process is starting."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parser.text_string_to_metric_families(text)
        for s in family.samples
    }


def published() -> int:
    return OutboxMessage.objects.filter(published_at__isnull=False).count()


def test_relay_and_consumers_serve_their_counters_on_their_own_ports(workers):
    relay_port, consumers_port = free_port(), free_port()
    relay = workers.start("run_outbox_relay", "--metrics-port", str(relay_port))
    consumers = workers.start("run_consumers", "--metrics-port", str(consumers_port))

    write_note("counted")
    handled = (
        "messaging_consumer_messages_total",
        (("consumer", "archive"), ("event_type", "notes.note.written"), ("outcome", "handled")),
    )
    wait_until(lambda: scrape(consumers_port).get(handled) == 1, timeout=30, message="the note handled and counted")
    # The archive's answer (archive.note.filed) goes through the same relay: once it has been tried
    # (published by the embedded broker; returned by RabbitMQ, where no queue takes it), the
    # relay's count is all there will be.
    answer = OutboxMessage.objects.filter(event_type="archive.note.filed")
    relayed = ("messaging_relay_published_total", ())
    wait_until(
        lambda: answer.filter(published_at__isnull=False).exists() or answer.filter(attempts__gte=1).exists(),
        timeout=30,
        message="the answer relayed",
    )
    wait_until(lambda: scrape(relay_port).get(relayed) == published(), timeout=30, message="the relay's count")

    counted = scrape(relay_port)
    assert counted[relayed] == published() == (1 if amqp() else 2)
    assert counted[("messaging_relay_batch_seconds_count", ())] >= 1
    consumed = scrape(consumers_port)
    assert consumed[handled] == 1
    assert consumed[("messaging_consumer_handle_seconds_count", (("consumer", "archive"),))] >= 1
    assert [workers.stop(relay), workers.stop(consumers)] == [0, 0]
