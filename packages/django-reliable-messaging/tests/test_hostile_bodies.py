"""Every message from the broker is hostile (issue 43): a body with numbers JSON has not, a body
past MAX_MESSAGE_BYTES, headers that would grow past RabbitMQ's frame_max at every retry. Each is
refused or bounded at the edge: a dead letter with its reason, never a stuck consumer."""

import hashlib
import json
import subprocess
import sys
import uuid
import zlib

import pytest
from archive.models import Filed
from django.core.exceptions import ImproperlyConfigured
from reliable_messaging._amqp_properties import KEPT_OF_OVERSIZED, OVERSIZED, bounded
from reliable_messaging._conf import check_settings
from reliable_messaging._consumer_batch import RETRY_HEADERS_BYTES, retry_headers
from reliable_messaging._envelope import InvalidMessage, parse_incoming
from reliable_messaging.models import DeadLetter

from conftest import HERE, amqp, amqp_connection, wait_until

LIMIT = 1024 * 1024  # MAX_MESSAGE_BYTES's default
WRITTEN = {"event_type": "notes.note.written", "schema_version": 1}
FRAME_MAX = 131072  # RabbitMQ's and py-amqp's


def refusal(body: bytes, headers: dict | None = None) -> tuple[str, str]:
    with pytest.raises(InvalidMessage) as refused:
        parse_incoming(body, {"message_id": "m"}, {**WRITTEN, **(headers or {})}, "rk")
    return refused.value.reason, refused.value.detail


# --- 1. numbers JSON has not ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "detail"),
    [
        ("NaN", "the body holds NaN, which is no JSON number"),
        ("Infinity", "the body holds Infinity, which is no JSON number"),
        ("-Infinity", "the body holds -Infinity, which is no JSON number"),
        ("1e400", "the body holds a number out of range: 1e400"),
        ("-1E999", "the body holds a number out of range: -1E999"),
        ("1.5e309", "the body holds a number out of range: 1.5e309"),
    ],
)
def test_a_number_json_has_not_is_refused_as_invalid_payload_when_parsed(number, detail):
    body = f'{{"note_id": "{uuid.uuid4()}", "text": "x", "n": [1, {number}]}}'.encode()

    assert refusal(body) == ("invalid_payload", detail)


def test_numbers_in_range_are_read_as_before():
    event = parse_incoming(b'{"a": 1e308, "b": 1e-400, "c": -0.5, "d": 10000000000000000000000}', {"message_id": "m"},
                           WRITTEN, "rk")  # fmt: skip

    assert event.payload == {"a": 1e308, "b": 0.0, "c": -0.5, "d": 10**22}


# --- 2. a body past MAX_MESSAGE_BYTES ------------------------------------------------------------


def test_a_body_over_the_limit_is_cut_to_its_prefix_and_marked_and_one_at_the_limit_is_left_as_it_is():
    over = b"[" + b" " * LIMIT
    at = b" " * LIMIT

    body, headers = bounded(over, {"event_type": "a.b.c"})

    assert body == over[:KEPT_OF_OVERSIZED]
    assert headers == {
        "event_type": "a.b.c",
        OVERSIZED: f"the body is {LIMIT + 1} bytes (sha256 {hashlib.sha256(over).hexdigest()}), over "
        f"MAX_MESSAGE_BYTES ({LIMIT}): its first {KEPT_OF_OVERSIZED} kept",
    }
    assert refusal(body, headers) == ("payload_too_large", headers[OVERSIZED])
    assert bounded(at, {}) == (at, {})


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "1MB", None])
def test_a_max_message_bytes_that_is_no_positive_integer_is_refused_at_start_up(settings, value):
    settings.MESSAGING = {**settings.MESSAGING, "MAX_MESSAGE_BYTES": value}

    with pytest.raises(ImproperlyConfigured) as refused:
        check_settings()

    assert str(refused.value) == (
        f"MESSAGING['MAX_MESSAGE_BYTES'] is {value!r}: give a positive number of bytes (1 MiB: 1048576)"
    )


def test_a_process_does_not_start_with_a_max_message_bytes_it_cannot_read(with_settings):
    started = with_settings(MAX_MESSAGE_BYTES="1MB")("check", ok=False)

    assert started.returncode == 1
    assert (
        "ImproperlyConfigured: MESSAGING['MAX_MESSAGE_BYTES'] is '1MB': give a positive number of bytes "
        "(1 MiB: 1048576)"
    ) in started.stderr


# --- 3. headers that grow at every retry ---------------------------------------------------------


def test_a_retry_replaces_the_bus_headers_leaves_out_rabbitmqs_and_the_largest_hostile_ones():
    arrived = {
        **WRITTEN,
        "x-tenant": "t1",
        "x-death": [{"count": 1, "queue": "archive_queue_delay_1000ms", "reason": "expired"}],
        "x-first-death-queue": "archive_queue_delay_1000ms",
        "x-delivery-count": 2,
        "x-attempt": 2,
        "x-first-failed-at": "2026-01-01T00:00:00+00:00",
        "x-last-error": "the first error",
        "x-original-routing-key": "r" * 256,  # no routing key: the delivery's own instead
        **{f"x-filler-{i}": "f" * 10_000 for i in range(10)},
    }

    retried = retry_headers(arrived, 2, "E" * 600, "notes.note.written")

    assert retried == {
        **WRITTEN,
        "x-tenant": "t1",
        "x-filler-9": "f" * 10_000,  # what fits: the largest, then the first, left out
        "x-attempt": 3,
        "x-first-failed-at": "2026-01-01T00:00:00+00:00",
        "x-last-error": "E" * 500,
        "x-original-routing-key": "notes.note.written",
    }


def test_retry_headers_stay_the_same_size_however_many_retries():
    headers = {**WRITTEN, **{f"x-filler-{i}": "f" * 5_000 for i in range(20)}}
    sizes = []
    for attempt in range(1, 30):
        headers = retry_headers(headers, attempt, "IntegrityError: " + "e" * 490, "notes.note.written")
        sizes.append(len(json.dumps(headers)))
        # RabbitMQ's own at the delay queue's expiry, as it arrives with the next delivery
        headers["x-death"] = [{"count": attempt, "queue": f"q{attempt}", "reason": "expired"}] * attempt

    assert max(sizes) < RETRY_HEADERS_BYTES
    assert sorted(set(sizes)) == [sizes[0], sizes[0] + 1]  # from x-attempt 10 on, one more digit


# --- the consumer, as a process, on RabbitMQ -----------------------------------------------------

needs_rabbitmq = pytest.mark.skipif(not amqp(), reason="raw messages are published to RabbitMQ")


def publish_raw(body: bytes, headers: dict, message_id: str | None = None) -> str:
    """Into archive_queue through the default exchange with py-amqp itself (exact header types),
    confirmed, as a hostile producer would."""
    import amqp as py_amqp

    message_id = message_id or str(uuid.uuid4())
    with amqp_connection() as connection:
        message = py_amqp.Message(body, application_headers=headers, message_id=message_id, delivery_mode=2,
                                  content_type="application/json")  # fmt: skip
        connection.channel().basic_publish_confirm(message, exchange="", routing_key="archive_queue",
                                                   mandatory=True, confirm_timeout=30)  # fmt: skip
    return message_id


def declared(manage) -> None:
    """The topology declared before anything is published into it."""
    manage("run_consumers", "--once")


def note(note_id: uuid.UUID, text: str = "x", padding: int = 0, **more) -> bytes:
    return json.dumps({"note_id": str(note_id), "text": text, **more}).encode() + b" " * padding


@needs_rabbitmq
def test_numbers_json_has_not_are_dead_letters_at_the_first_delivery_no_handler_run(manage):
    declared(manage)
    refused = {
        "NaN": "the body holds NaN, which is no JSON number",
        "Infinity": "the body holds Infinity, which is no JSON number",
        "-Infinity": "the body holds -Infinity, which is no JSON number",
        "1e400": "the body holds a number out of range: 1e400",
    }
    sent = {
        publish_raw(b'{"note_id": "%s", "text": %s}' % (str(uuid.uuid4()).encode(), number.encode()), WRITTEN): error
        for number, error in refused.items()
    }

    consumed = manage("run_consumers", "--once")

    letters = DeadLetter.objects.values_list("message_id", "reason", "error", "attempts")
    assert set(letters) == {(message_id, "invalid_payload", error, 1) for message_id, error in sent.items()}
    assert "retry" not in consumed.stderr
    assert Filed.objects.count() == 0


@needs_rabbitmq
def test_a_body_over_max_message_bytes_is_a_dead_letter_of_its_prefix_and_one_at_the_limit_is_handled(manage):
    declared(manage)
    under_id, over_id = uuid.uuid4(), uuid.uuid4()
    under = note(under_id, "under")
    under += b" " * (LIMIT - len(under))
    over = note(over_id, "over")
    over += b" " * (LIMIT + 1 - len(over))
    over_message = publish_raw(over, WRITTEN)
    publish_raw(under, WRITTEN)

    manage("run_consumers", "--once")

    assert list(Filed.objects.values_list("note_id", "text")) == [(under_id, "under")]
    (letter,) = DeadLetter.objects.all()
    assert (letter.message_id, letter.reason, letter.attempts) == (over_message, "payload_too_large", 1)
    assert letter.error == (
        f"the body is {LIMIT + 1} bytes (sha256 {hashlib.sha256(over).hexdigest()}), over MAX_MESSAGE_BYTES "
        f"({LIMIT}): its first {KEPT_OF_OVERSIZED} kept"
    )
    assert bytes(letter.body) == over[:KEPT_OF_OVERSIZED]
    assert letter.headers == {**WRITTEN, OVERSIZED: letter.error}


def peak_rss(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        (line,) = [line for line in status if line.startswith("VmHWM:")]
    return int(line.split()[1]) * 1024


@needs_rabbitmq
@pytest.mark.timeout(240)
def test_a_50_mb_body_costs_a_consumer_no_more_than_a_few_times_the_limit(manage):
    declared(manage)
    consumer = subprocess.Popen(
        [sys.executable, str(HERE / "manage.py"), "run_consumers"],
        cwd=manage.cwd,
        env=manage.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        # Warmed up: a message handled and an oversized one dead-lettered, each code path run once.
        publish_raw(note(uuid.uuid4()), WRITTEN)
        publish_raw(b" " * (LIMIT + 1), WRITTEN)
        wait_until(
            lambda: DeadLetter.objects.count() == 1 and Filed.objects.count() == 1,
            timeout=60,
            message="the warm-up note filed and the oversized one dead-lettered",
        )
        baseline = peak_rss(consumer.pid)

        huge = b"[" + b"1," * 25_000_000 + b"1]"  # 50 MB of a list py-amqp, json and psycopg would all copy
        message_id = publish_raw(huge, WRITTEN)
        wait_until(
            lambda: DeadLetter.objects.filter(message_id=message_id).exists(),
            timeout=60,
            message="the 50 MB body dead-lettered",
        )

        grown = peak_rss(consumer.pid) - baseline
        assert consumer.poll() is None
    finally:
        consumer.terminate()
        consumer.wait(30)
    assert grown < 5 * LIMIT, f"the consumer's peak RSS grew by {grown / 2**20:.1f} MiB"
    letter = DeadLetter.objects.get(message_id=message_id)
    assert (letter.reason, len(letter.body)) == ("payload_too_large", KEPT_OF_OVERSIZED)
    assert letter.error.startswith(f"the body is {len(huge)} bytes (sha256 {hashlib.sha256(huge).hexdigest()})")


def headers_of_size(frame_room: int) -> dict:
    """Event headers, a small header of the producer's own and filler, sized so that the message's
    content header leaves ``frame_room`` bytes of RabbitMQ's frame_max."""
    import amqp as py_amqp

    headers = {**WRITTEN, "x-tenant": "t1", **{f"x-filler-{i:02d}": "f" * 10_000 for i in range(12)}}

    def frame(headers) -> int:  # frame header (7) + class, weight, body size (12) + properties + frame end (1)
        message = py_amqp.Message(b"", application_headers=headers, message_id=str(uuid.uuid4()), delivery_mode=2,
                                  content_type="application/json")  # fmt: skip
        return 7 + 12 + len(message._serialize_properties()) + 1

    headers["x-filler-12"] = "f" * (FRAME_MAX - frame_room - frame({**headers, "x-filler-12": ""}))
    assert frame(headers) == FRAME_MAX - frame_room
    return headers


@needs_rabbitmq
def test_a_failing_message_with_headers_near_frame_max_is_retried_then_dead_lettered_on_one_connection(
    manage, with_settings
):
    declared(manage)
    failing = uuid.uuid4()
    Filed.objects.create(note_id=failing, text="filed before")  # the handler's insert fails: a retry
    headers = headers_of_size(frame_room=200)
    message_id = publish_raw(note(failing, "again"), headers)

    consumed = with_settings(CONSUMER_RETRY_DELAYS=[0.2], CONSUMER_MAX_ATTEMPTS=3)("run_consumers", "--once")

    assert "broker unavailable" not in consumed.stderr
    assert consumed.stderr.count("handler failed, retry") == 2
    assert consumed.stderr.count("a retry leaves out 12 headers over 16384 bytes") == 1  # then they are gone
    (letter,) = DeadLetter.objects.all()
    assert (letter.message_id, letter.reason, letter.attempts) == (message_id, "handler_error", 3)
    assert letter.error.startswith("IntegrityError: duplicate key value violates unique constraint")
    kept = {name: value for name, value in letter.headers.items() if name not in ("x-death", "x-first-death-exchange",
            "x-first-death-queue", "x-first-death-reason", "x-delivery-count")}  # fmt: skip
    assert sorted(kept) == sorted(
        [*WRITTEN, "x-tenant", "x-filler-11", "x-attempt", "x-first-failed-at", "x-last-error",
         "x-original-routing-key"]
    )  # fmt: skip
    assert kept["x-attempt"] == 3
    assert len(json.dumps(letter.headers)) < RETRY_HEADERS_BYTES


@needs_rabbitmq
@pytest.mark.parametrize(("compression", "shown"), [("zlib", "'zlib'"), ("nope", "'nope'"), (7, "7")])
def test_a_compressed_body_is_a_dead_letter_never_decompressed_and_the_consumer_goes_on(manage, compression, shown):
    """kombu decompresses a body whose headers say ``compression``: without bound (a few hundred
    KB of zlib make gigabytes), or it raises out of the consumer loop, for ever."""
    declared(manage)
    message_id = publish_raw(zlib.compress(b"\0" * 10_000_000), {**WRITTEN, "compression": compression})
    handled = uuid.uuid4()
    publish_raw(note(handled), WRITTEN)

    manage("run_consumers", "--once")

    (letter,) = DeadLetter.objects.all()
    assert (letter.message_id, letter.reason, letter.error) == (
        message_id, "invalid_headers", f"its body is compressed ({shown}): the bus reads none",
    )  # fmt: skip
    assert list(Filed.objects.values_list("note_id", flat=True)) == [handled]
