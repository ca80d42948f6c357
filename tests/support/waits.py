"""Waiting for the whole state a test asserts, not for one part of it.

What answers one event arrives independently: the three answers to a cancellation come from
three consumers, the refund from the gateway worker (a process of its own), another context's
entries of a timeline through the event log's consumer, a consumer's counters after its commit
and its ack. A test that waits for one of them and then asserts the others fails whenever the
machine is slow. It waits here for all of them, bounded, then asserts exactly on what was read.
"""

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


def read_until(
    read: Callable[[], T],
    done: Callable[[T], bool],
    *,
    timeout: float = 60,
    interval: float = 0.2,
    what: str = "the state",
) -> T:
    """Call ``read`` until ``done`` accepts what it returned, and return that reading (for the
    test to assert exactly). ``AssertionError`` after ``timeout`` seconds, with the last reading."""
    deadline = time.monotonic() + timeout
    while True:
        reading = read()
        if done(reading):
            return reading
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not there after {timeout}s; last read: {reading}")
        time.sleep(interval)


def wait_for_events(
    read: Callable[[], list[str]],
    expected: Iterable[str],
    *,
    timeout: float = 60,
    interval: float = 0.2,
    what: str = "the timeline",
) -> list[str]:
    """Call ``read`` (the event types of an order's timeline, in its order) until it holds every
    event type of ``expected`` (as many times as it is listed there); return that reading.
    ``AssertionError`` after ``timeout`` seconds, with the last reading."""
    wanted = Counter(expected)
    return read_until(
        read,
        lambda events: not wanted - Counter(events),
        timeout=timeout,
        interval=interval,
        what=f"{what} holding {sorted(wanted.elements())}",
    )
