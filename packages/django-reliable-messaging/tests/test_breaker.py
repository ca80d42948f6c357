"""A handler's circuit breaker (its declaration's ``breaker = {failures, cool_down}``): after that
many transient failures in a row its messages wait, unattempted and with their attempts unspent,
for the cool-down; then one is tried, and a success closes it. No dead letter for an outage.

The breaking context (retrying/breaking/context.toml): failures = 2, cool_down = 1 s; attempts and
delays the settings' (4, every 0.2 s). Its handler's gateway is down for as many calls as
``FAILING_CALLS`` says. Both backends."""

from collections import defaultdict

import pytest
from notes.services import write_note
from reliable_messaging import _metrics as metrics
from reliable_messaging.models import DeadLetter, InboxMessage
from retrying.bus import bus, consume, relay  # noqa: F401 - bus: the fixture
from retrying.handlers import CALLS, FAILING_CALLS

HANDLER = "retrying.breaking.handlers.on_note_written"
COOL_DOWN, EARLY, LATE = 1.0, 0.06, 0.8


@pytest.fixture
def breaker_states(monkeypatch) -> list[bool]:
    """Every value ``messaging_breaker_open{consumer="breaking",handler=HANDLER}`` was set to, in order."""
    states: list[bool] = []
    original = metrics.breaker_open

    def recorded(consumer: str, handler: str, is_open: bool) -> None:
        if (consumer, handler) == ("breaking", HANDLER):
            states.append(is_open)
        original(consumer, handler, is_open)

    monkeypatch.setattr(metrics, "breaker_open", recorded)
    return states


def attempts_by_note() -> dict[str, list[int]]:
    attempts = defaultdict(list)
    for _, text, attempt, _ in CALLS:
        attempts[text].append(attempt)
    return dict(attempts)


@pytest.fixture
def one_at_a_time(settings) -> None:
    """One message in hand at a time (RabbitMQ would send several at once, decided together)."""
    settings.MESSAGING = {**settings.MESSAGING, "CONSUMER_PREFETCH": 1}


@pytest.mark.usefixtures("bus")
def test_an_outage_opens_the_breaker_messages_wait_and_a_trial_closes_it(one_at_a_time, breaker_states):
    FAILING_CALLS["breaking"] = 3  # two open the breaker, the first trial fails, the second passes
    for n in range(1, 5):
        write_note(f"note {n}")
    relay()
    consume("breaking")

    times = [at for _, _, _, at in CALLS]
    # Two failures; nothing for the cool-down; a trial (fails); nothing for the cool-down; a trial (passes); the rest.
    assert len(CALLS) == 7
    assert COOL_DOWN - EARLY <= times[2] - times[1] <= COOL_DOWN + LATE, times
    assert COOL_DOWN - EARLY <= times[3] - times[2] <= COOL_DOWN + LATE, times
    assert times[6] - times[3] < 0.5 * COOL_DOWN, times  # closed: the waiting ones come back within a step
    # Waiting spent no attempt, and neither did the failure that opened the breaker nor the failed
    # trial: of the three failures only the first, before the breaker opened, spent one.
    attempts = attempts_by_note()
    assert sorted(attempts) == ["note 1", "note 2", "note 3", "note 4"]
    assert sum(max(tried) - 1 for tried in attempts.values()) == 1, attempts
    assert breaker_states == [False, True, True, False]
    assert DeadLetter.objects.count() == 0
    assert InboxMessage.objects.filter(consumer="breaking").count() == 4


@pytest.mark.usefixtures("bus")
def test_a_breaker_in_a_batch_keeps_every_message_and_closes(breaker_states):
    FAILING_CALLS["breaking"] = 6
    for n in range(1, 7):
        write_note(f"note {n}")
    relay()
    consume("breaking", batch_size=10)

    # A batch runs a handler again after another member failed: the attempts, not the calls.
    attempts = {text: sorted(set(tried)) for text, tried in attempts_by_note().items()}
    assert sorted(attempts) == [f"note {n}" for n in range(1, 7)]
    assert all(tried == list(range(1, len(tried) + 1)) for tried in attempts.values()), attempts
    assert max(len(tried) for tried in attempts.values()) < 4  # none spent its budget (4)
    assert breaker_states[0] is False and True in breaker_states and breaker_states[-1] is False
    assert DeadLetter.objects.count() == 0
    assert InboxMessage.objects.filter(consumer="breaking").count() == 6


@pytest.mark.usefixtures("bus")
def test_a_handler_s_bug_does_not_open_its_breaker(one_at_a_time, breaker_states, monkeypatch):
    from retrying.breaking import handlers

    def buggy(event):
        handlers.record("breaking", event)
        raise KeyError("total")

    monkeypatch.setattr(handlers, "on_note_written", buggy)
    from reliable_messaging import _registry as registry
    from reliable_messaging._declarations import installed

    (declaration,) = [d for d in installed() if d.name == "breaking"]
    registry._handlers.pop("breaking")
    registry.register_declared(declaration)
    for n in range(1, 4):
        write_note(f"note {n}")
    relay()
    consume("breaking")

    # Each note its four attempts (0.2 s apart), then a dead letter: no breaker held any back.
    assert sorted(attempts_by_note().values()) == [[1, 2, 3, 4]] * 3
    assert breaker_states == [False]
    assert DeadLetter.objects.filter(consumer="breaking", reason="handler_error", attempts=4).count() == 3
