"""A handler's own retry policy, declared in its context's ``[handlers."<handler>"]``: its attempts,
the delays between them, the exceptions never retried; nothing of it in the broker's queue
arguments, so deployments of other policies share a broker and a policy changes by a restart.

The test contexts are in retrying/ (their declarations say each policy); the relay and the
consumer loop run in the test's process, on the test's database and broker (both backends)."""

import json
import time
import uuid

import pytest
from django.test import override_settings
from notes.services import write_note
from reliable_messaging import _broker as broker
from reliable_messaging import _registry as registry
from reliable_messaging._declarations import (
    Breaker,
    DeclarationError,
    HandlerPolicy,
    installed,
    read_declaration,
)
from reliable_messaging.models import DeadLetter, InboxMessage
from reliable_messaging.testing import topology_queues
from retrying.bus import bus, consume, relay  # noqa: F401 - bus: the fixture
from retrying.handlers import CALLS

from conftest import amqp

# A retry comes at most half the ladder's shortest step early; late by what a loaded machine adds.
EARLY, LATE = broker.DUE_WITHIN + 0.01, 0.6


def calls(consumer: str) -> list[tuple[str, int]]:
    return [(text, attempt) for who, text, attempt, _ in CALLS if who == consumer]


def attempts(consumer: str, text: str) -> list[int]:
    return sorted({attempt for who, said, attempt, _ in CALLS if (who, said) == (consumer, text)})


def gaps(consumer: str, text: str | None = None) -> list[float]:
    times = [at for who, said, _, at in CALLS if who == consumer and text in (None, said)]
    return [later - earlier for earlier, later in zip(times, times[1:], strict=False)]


def dead_letters() -> list[tuple[str, str, int, str]]:
    return list(DeadLetter.objects.order_by("consumer").values_list("consumer", "reason", "attempts", "error"))


@pytest.mark.usefixtures("bus")
def test_an_exception_never_retried_is_a_dead_letter_at_its_first_failure():
    write_note("unfixable note")
    relay()
    consume("retrying")

    assert calls("retrying") == [("unfixable note", 1)]
    assert dead_letters() == [("retrying", "never_retry", 1, "Unfixable: no shelf for 'unfixable note'")]


@pytest.mark.usefixtures("bus")
def test_a_handler_has_its_own_attempts_and_delays():
    write_note("failing note")
    relay()
    consume("retrying")

    # attempts = 3, delays = [0.3, 0.6]
    assert calls("retrying") == [("failing note", 1), ("failing note", 2), ("failing note", 3)]
    first, second = gaps("retrying")
    assert 0.3 - EARLY <= first <= 0.3 + LATE, first
    assert 0.6 - EARLY <= second <= 0.6 + LATE, second
    assert dead_letters() == [("retrying", "handler_error", 3, "TransientError: the shelf is busy: 'failing note'")]


@pytest.mark.usefixtures("bus")
def test_two_policies_side_by_side_on_one_broker():
    write_note("failing everywhere")
    write_note("fine")
    relay()
    consume("retrying", "twin", "breaking")

    # A batch (several consumers' messages at once on RabbitMQ) is in correlation-id order, and
    # runs a member again when another fails: per note, the attempts, not the calls.
    assert attempts("retrying", "failing everywhere") == [1, 2, 3]
    assert attempts("twin", "failing everywhere") == [1, 2]
    (twin_gap,) = gaps("twin", "failing everywhere")
    assert 0.2 - EARLY <= twin_gap <= 0.2 + LATE, twin_gap
    # the breaker's handler declares no attempts: the settings' (4, every 0.2 s); its text does not fail it
    assert attempts("breaking", "failing everywhere") == attempts("breaking", "fine") == [1]
    assert attempts("retrying", "fine") == attempts("twin", "fine") == [1]
    assert [(consumer, reason, attempts) for consumer, reason, attempts, _ in dead_letters()] == [
        ("retrying", "handler_error", 3),
        ("twin", "handler_error", 2),
    ]
    assert InboxMessage.objects.filter(consumer__in=["retrying", "twin", "breaking"]).count() == 4


@pytest.mark.usefixtures("bus")
def test_no_policy_is_a_queue_argument(settings):
    """Deployments of other policies declare the very same queues: none refuses another's (406)."""

    def declared() -> dict[str, list[tuple[str, dict]]]:
        with broker.connect() as connection:
            connection.connect()
            return {
                c: [(q.name, q.queue_arguments) for q in queues] for c, queues in topology_queues(connection).items()
            }

    one = declared()
    with override_settings(
        MESSAGING={**settings.MESSAGING, "CONSUMER_RETRY_DELAYS": [7, 11.5], "CONSUMER_MAX_ATTEMPTS": 9}
    ):
        other = declared()

    assert one == other
    assert [name for name, _ in one["retrying"]][2:] == [
        "retrying_queue_delay_100ms",
        "retrying_queue_delay_1000ms",
        "retrying_queue_delay_5000ms",
        "retrying_queue_delay_30000ms",
        "retrying_queue_delay_300000ms",
        "retrying_queue_delay_3600000ms",
    ]


def put(queue: str, headers: dict) -> str:
    """A message of notes.note.written straight into ``queue``, as a retry of another release would arrive."""
    message_id, note_id = str(uuid.uuid4()), str(uuid.uuid4())
    from reliable_messaging._consumer import ConsumerWorker

    worker = ConsumerWorker(["retrying"])
    connection = worker.session.open()
    try:
        connection.Producer().publish(
            json.dumps({"note_id": note_id, "text": "failing again"}).encode(),
            exchange="",
            routing_key=queue,
            message_id=message_id,
            correlation_id=note_id,
            content_type="application/json",
            content_encoding="utf-8",
            headers={"event_type": "notes.note.written", "schema_version": 1, **headers},
        )
    finally:
        worker.session.end(None, graceful=True)
    return message_id


@pytest.mark.parametrize(
    "wait",
    [
        None,  # a release before per-handler policies: no wait header
        "soon",  # a header that is no number
        2 * 86400 * 1000,  # further ahead than any wait may be declared
    ],
)
@pytest.mark.usefixtures("bus")
def test_a_retry_without_a_wait_of_the_bus_s_is_attempted_at_once_with_its_attempt(wait):
    headers = {"x-attempt": 2}
    if wait is not None:
        headers[broker.WAIT_HEADER] = wait if isinstance(wait, str) else int(time.time() * 1000) + wait
    put("retrying_queue", headers)
    started = time.monotonic()
    consume("retrying")

    # attempt 2 of 3: once more after 0.6 s, then a dead letter
    assert calls("retrying") == [("failing again", 2), ("failing again", 3)]
    # at once: not parked for a wait (the 2 days would never come, "soon" no wait at all); a loaded
    # machine's lateness allowed (0.54 s seen with both cores busy, the consumer's start included)
    assert CALLS[0][3] - started < 0.5 + LATE
    assert [(c, r, a) for c, r, a, _ in dead_letters()] == [("retrying", "handler_error", 3)]


@pytest.mark.usefixtures("bus")
def test_a_wait_in_flight_is_kept_whatever_the_policy_now():
    """A retry carries its wait: one sent by a release of another policy comes when it said."""
    started = time.monotonic()  # before the wait is reckoned: putting it may take a while
    put("retrying_queue", {"x-attempt": 2, broker.WAIT_HEADER: int((time.time() + 1.3) * 1000)})
    consume("retrying")

    assert calls("retrying")[0] == ("failing again", 2)
    assert 1.3 - EARLY <= CALLS[0][3] - started <= 1.3 + LATE


# --- the declaration, checked at start-up -----------------------------------------------------


def declare(tmp_path, handlers: str) -> None:
    package = tmp_path / "shelf"
    package.mkdir()
    (package / "context.toml").write_text(
        'name = "shelf"\n[consumes]\n"notes.note.written" = "shelf.handlers.on_note"\n' + handlers
    )
    read_declaration(tmp_path, "shelf")


def test_a_declared_policy_is_read_with_its_defaults(tmp_path):
    package = tmp_path / "shelf"
    package.mkdir()
    (package / "context.toml").write_text(
        'name = "shelf"\n[consumes]\n"notes.note.written" = "shelf.handlers.on_note"\n'
        '[handlers."shelf.handlers.on_note"]\nattempts = 2\nnever_retry = ["decimal.InvalidOperation"]\n'
        "breaker = { cool_down = 12 }\n"
    )
    policy = read_declaration(tmp_path, "shelf").handlers["shelf.handlers.on_note"]

    assert policy == HandlerPolicy(
        attempts=2, delays=None, never_retry=("decimal.InvalidOperation",), breaker=Breaker(failures=5, cool_down=12.0)
    )
    assert [policy.delay_after(n) for n in (1, 2, 3, 4)] == [1.0, 5.0, 30.0, 30.0]  # CONSUMER_RETRY_DELAYS
    assert HandlerPolicy().max_attempts() == 5  # CONSUMER_MAX_ATTEMPTS


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ('[handlers."shelf.handlers.other"]\nattempts = 2\n',
         "handlers 'shelf.handlers.other': not a handler under consumes or obeys"),
        ('[handlers."shelf.handlers.on_note"]\nattempts = 0\n',
         "handlers 'shelf.handlers.on_note': attempts = 0: an integer from 1 to 1000"),
        ('[handlers."shelf.handlers.on_note"]\nattempts = true\n',
         "handlers 'shelf.handlers.on_note': attempts = True: an integer from 1 to 1000"),
        ('[handlers."shelf.handlers.on_note"]\ndelays = []\n',
         "handlers 'shelf.handlers.on_note': delays = []: a list of seconds, one per retry (the last repeats)"),
        ('[handlers."shelf.handlers.on_note"]\ndelays = [1, -2]\n',
         "handlers 'shelf.handlers.on_note': delays = -2: seconds, more than 0 and at most 86400"),
        ('[handlers."shelf.handlers.on_note"]\nnever_retry = ["Oops"]\n',
         "handlers 'shelf.handlers.on_note': never_retry = ['Oops']: a list of dotted exception classes"),
        ('[handlers."shelf.handlers.on_note"]\nretries = 3\n',
         "handlers 'shelf.handlers.on_note': unknown key 'retries' (attempts, delays, never_retry, breaker)"),
        ('[handlers."shelf.handlers.on_note"]\nbreaker = { failures = 3, cooldown = 5 }\n',
         "handlers 'shelf.handlers.on_note': breaker: unknown key 'cooldown' (failures, cool_down)"),
        ('[handlers."shelf.handlers.on_note"]\nbreaker = { cool_down = 0 }\n',
         "handlers 'shelf.handlers.on_note': breaker.cool_down = 0: seconds, more than 0 and at most 86400"),
    ],
)  # fmt: skip
def test_a_wrong_policy_stops_the_start_naming_the_key(tmp_path, table, error):
    with pytest.raises(DeclarationError) as refused:
        declare(tmp_path, table)

    assert str(refused.value).startswith(f"shelf/context.toml: {error}")


@pytest.mark.usefixtures("bus")
def test_an_exception_never_retried_must_be_one_the_host_can_import(monkeypatch):
    (retrying,) = [d for d in installed() if d.name == "retrying"]
    policy = retrying.handlers["retrying.handlers.on_note_written"]
    for wrong, why in [
        ("retrying.handlers.Unfixed", "retrying.handlers has no Unfixed"),
        ("retrying.nowhere.Unfixable", "No module named 'retrying.nowhere'"),
        ("retrying.handlers.record", "(<function record at "),
    ]:
        changed = type(retrying)(**{**retrying.__dict__, "handlers": {
            "retrying.handlers.on_note_written": type(policy)(**{**policy.__dict__, "never_retry": (wrong,)})
        }})  # fmt: skip
        with pytest.raises(DeclarationError) as refused:
            registry.register_declared(changed)
        assert str(refused.value).startswith(
            f"retrying/context.toml: handlers 'retrying.handlers.on_note_written': never_retry {wrong!r} names no "
            f"exception class ("
        ), refused.value
        assert why in str(refused.value)


@pytest.mark.usefixtures("bus")
def test_the_broker_s_delay_queues_are_the_ladder_s_only():
    assert not amqp() or broker.retry_queues("retrying")[0].queue_arguments["x-message-ttl"] == 100
    waits = (0.01, 0.1, 0.6, 0.9, 0.91, 1.0, 4.5, 4.6, 12, 299, 301, 3300, 7200)
    assert [broker.delay_step(w) for w in waits] == [
        0.1, 0.1, 0.1, 0.1, 1.0, 1.0, 1.0, 5.0, 5.0, 300.0, 300.0, 3600.0, 3600.0,
    ]  # fmt: skip
