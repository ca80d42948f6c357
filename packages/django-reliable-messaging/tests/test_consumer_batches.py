"""Batched consumers: deliveries already waiting are decided in one transaction; a failing member
rolls back alone and its retry is no duplicate; the same message twice in one batch takes effect
once. The relay and the consumer loop run in the test's process (retrying/bus.py), on both
backends; the consumer's counts are read from this process's metrics."""

import logging

import pytest
from archive.models import Filed
from notes.services import write_note
from reliable_messaging.models import DeadLetter, InboxMessage, OutboxMessage
from retrying.bus import bus, consume, relay  # noqa: F401 - bus: the fixture

from conftest import amqp, drained

pytestmark = pytest.mark.usefixtures("bus")
prometheus_client = pytest.importorskip("prometheus_client", reason="the consumer's counts: the extra 'metrics'")


@pytest.fixture(autouse=True)
def archive_queue_emptied(empty_queues):
    """The archive's queue empty before (``empty_queues``) and after: the twin's notes reach it too."""
    yield
    if amqp():
        drained("archive_queue")


class Counts:
    """What this process's consumer counted from the start of the test on: its deliveries by
    outcome for a consumer, and its batches (``messaging_consumer_batch_size``)."""

    def __init__(self, consumer: str):
        self.consumer = consumer
        self.before = self.now()

    def now(self) -> dict[str, float]:
        found: dict[str, float] = {}
        for family in prometheus_client.REGISTRY.collect():
            for sample in family.samples:
                if sample.name == "messaging_consumer_messages_total" and sample.labels["consumer"] == self.consumer:
                    key = sample.labels["outcome"]
                elif sample.name in ("messaging_consumer_batch_size_count", "messaging_consumer_batch_size_sum"):
                    key = sample.name
                else:
                    continue
                found[key] = found.get(key, 0) + sample.value
        return found

    def since(self) -> dict[str, float]:
        now = self.now()
        return {key: now[key] - self.before.get(key, 0) for key in now if now[key] != self.before.get(key, 0)}

    def outcomes(self) -> dict[str, float]:
        return {key: value for key, value in self.since().items() if not key.startswith("messaging_")}

    def batches(self) -> float:
        return self.since()["messaging_consumer_batch_size_count"]

    def batched(self) -> float:
        return self.since()["messaging_consumer_batch_size_sum"]


def event_id(text: str) -> str:
    return str(OutboxMessage.objects.get(event_type="notes.note.written", payload__text=text).event_id)


def test_deliveries_already_waiting_are_handled_in_one_transaction():
    for n in range(40):
        write_note(f"note {n}")
    relay()
    counts = Counts("archive")

    consume("archive", batch_size=40)

    assert counts.batched() == 40
    assert counts.batches() <= 10  # 40 messages: one transaction each before batching
    assert counts.outcomes() == {"handled": 40}
    assert Filed.objects.count() == 40
    assert OutboxMessage.objects.filter(event_type="archive.note.filed").count() == 40


def test_a_failing_message_rolls_back_alone_and_its_retry_is_not_a_duplicate(caplog):
    good = [f"good {n}" for n in range(6)]
    for text in [*good[:3], "failing note", *good[3:]]:
        write_note(text)
    relay()
    counts = Counts("twin")

    with caplog.at_level(logging.INFO, logger="reliable_messaging"):
        consume("twin", batch_size=10)  # attempts = 2, delays = [0.2] (retrying/twin/context.toml)

    # They shared a batch, whose first attempt the failing member abandoned for the savepoint one.
    assert counts.batches() < 7 + 1  # the 7, then the retry alone
    assert any(r.getMessage().startswith("a member of the batch failed") for r in caplog.records)
    # The six around it committed; the failing one was retried once (handled again, not a
    # duplicate), then dead-lettered, its inbox claim rolled back each time with its handler.
    assert counts.outcomes() == {"handled": 6, "retry": 1, "dead_letter": 1}
    letter = DeadLetter.objects.get(consumer="twin")
    failing = event_id("failing note")
    assert (letter.message_id, letter.reason, letter.attempts) == (failing, "handler_error", 2)
    assert not InboxMessage.objects.filter(consumer="twin", message_id=failing).exists()
    assert sorted(InboxMessage.objects.filter(consumer="twin").values_list("message_id", flat=True)) == sorted(
        event_id(text) for text in good
    )


def test_the_same_message_twice_in_one_batch_takes_effect_once():
    for n in range(5):
        write_note(f"note {n}")
    relay()
    twice = event_id("note 2")
    # The relay sends it again (a confirm lost before the row was marked): both copies wait.
    OutboxMessage.objects.filter(event_id=twice).update(published_at=None)
    relay()
    counts = Counts("archive")

    consume("archive", batch_size=10)

    assert counts.batches() < 5  # they did share a batch
    assert counts.outcomes() == {"handled": 5, "duplicate": 1}
    assert InboxMessage.objects.filter(consumer="archive", message_id=twice).count() == 1
    assert Filed.objects.filter(text="note 2").count() == 1
    assert OutboxMessage.objects.filter(event_type="archive.note.filed").count() == 5
