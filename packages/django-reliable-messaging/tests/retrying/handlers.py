"""Handlers that record each call and fail as told: by the note's text (``unfixable...``: an
exception the policy never retries; ``failing...``: a TransientError), or, for the breaker's
handler, for as many calls as ``FAILING_CALLS`` says."""

import time

from reliable_messaging.api import IncomingEvent, TransientError

# (consumer, text, attempt, time.monotonic()) of every call, in order
CALLS: list[tuple[str, str, int, float]] = []
FAILING_CALLS = {"breaking": 0}


class Unfixable(Exception):
    """What no retry fixes: the declaration's never_retry names it."""


def record(consumer: str, event: IncomingEvent) -> str:
    text = event.payload["text"]
    CALLS.append((consumer, text, event.attempt, time.monotonic()))
    return text


def on_note_written(event: IncomingEvent) -> None:
    text = record("retrying", event)
    if text.startswith("unfixable"):
        raise Unfixable(f"no shelf for {text!r}")
    if text.startswith("failing"):
        raise TransientError(f"the shelf is busy: {text!r}")
