"""Outbox rows that ``publish`` refuses today, as the relay still meets them: written by a release
before the check, or by hand. The relay's tests publish made-up ``test.*`` events the relay must
carry like any other (it reads no declaration)."""

import threading
from contextlib import contextmanager
from unittest import mock

from django.db import transaction
from reliable_messaging.api import publish
from reliable_messaging.models import OutboxMessage

_lock = threading.Lock()
_inside = 0  # threads inside at once (a test's late transaction beside its main thread): one patch for all
_patch = mock.patch("reliable_messaging._outbox.publish_refusal", return_value="")


@contextmanager
def unchecked_publishing():
    """Inside, ``publish`` writes an event no context declares, with a payload no schema checks."""
    global _inside
    with _lock:
        if _inside == 0:
            _patch.start()
        _inside += 1
    try:
        yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                _patch.stop()


def publish_things(count: int, event_type: str = "test.thing.happened") -> list[str]:
    """``count`` made-up events in the outbox, in one transaction; their message ids."""
    with unchecked_publishing(), transaction.atomic():
        return [
            str(publish(event_type=event_type, payload={"n": n}, aggregate_type="thing", aggregate_id=str(n)))
            for n in range(count)
        ]


def unpublished() -> int:
    return OutboxMessage.objects.filter(published_at__isnull=True).count()
