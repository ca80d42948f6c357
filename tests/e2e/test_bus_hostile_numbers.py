"""Numbers JSON has not (NaN, Infinity, a literal past a double's range), published with py-amqp
itself into the event log's queue (no schema stands in front of its handler): each is a dead
letter ``invalid_payload`` at its first delivery, never retried, nothing recorded (issue 43)."""

import uuid

import pytest
from reliable_messaging.models import DeadLetter, EventLogEntry

from faultlib.hostile import send
from faultlib.processes import wait_until
from tests.conftest import ALL_DATABASES

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

FAST_RETRIES = {"CONSUMER_RETRY_DELAYS": "0.2", "CONSUMER_MAX_ATTEMPTS": "3"}
REFUSED = {
    "NaN": "the body holds NaN, which is no JSON number",
    "Infinity": "the body holds Infinity, which is no JSON number",
    "-Infinity": "the body holds -Infinity, which is no JSON number",
    "1e400": "the body holds a number out of range: 1e400",
}


def body(number: str) -> bytes:
    return f'{{"order_id": "{uuid.uuid4()}", "total": {{"amount": {number}}}}}'.encode()


def test_numbers_json_has_not_are_dead_letters_at_the_first_delivery(processes, quiet_broker):
    consumer = processes.start("events", "run_consumers", "events", env=FAST_RETRIES)
    sent = {send("events_queue", body(number)): error for number, error in REFUSED.items()}

    wait_until(lambda: DeadLetter.objects.filter(consumer="events").count() >= len(sent), timeout=60,
               message="a dead letter each")  # fmt: skip

    letters = DeadLetter.objects.filter(consumer="events").values_list("message_id", "reason", "error", "attempts")
    assert set(letters) == {(message_id, "invalid_payload", error, 1) for message_id, error in sent.items()}
    assert not EventLogEntry.objects.filter(message_id__in=list(sent)).exists()
    assert "handler failed, retry" not in processes.logs()
    assert consumer.poll() is None
