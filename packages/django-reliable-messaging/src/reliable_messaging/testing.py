"""A test harness for the handlers of a project that uses the bus: no broker, no relay.

- ``deliver`` hands one message to a consumer exactly as the consumer loop does
  (``reliable_messaging._dispatch.decide``): the envelope and schema checks, the upcasters, the
  inbox (a message id seen before is a duplicate with no second effect) and the handler, in one
  transaction. It returns a ``Delivered``: the outcome (``Outcome.HANDLED``, ``DUPLICATE``,
  ``RETRY`` or ``DEAD_LETTER`` with its reason) and the events the handler published;
- ``published`` reads back what a context wrote to the outbox (type, version, payload), each
  event checked as ``publish`` checks it;
- ``advance_time`` runs scheduled messages' time forward: those due within it move into the
  outbox, as the relay would move them then, and are returned;
- ``assert_no_second_effect`` delivers one message twice and fails unless the second delivery is
  a duplicate that changed nothing ``effect()`` reads and published nothing;
- ``example_payload`` makes the smallest payload an event's schema accepts.

Use them inside a ``django_db`` test (pytest-django) or a ``django.test.TestCase``.
"""

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NamedTuple

from django.utils import timezone
from kombu import Connection, Queue

from reliable_messaging import _broker as broker
from reliable_messaging._conf import setting
from reliable_messaging._contracts import SYSTEM_CURRENCY, newest_version, publish_refusal, schemas, validation_error
from reliable_messaging._dead_letters import dead_letter_record
from reliable_messaging._dispatch import Decision, Outcome, decide
from reliable_messaging._envelope import ATTEMPT_HEADER, Envelope, envelope_for_outbox
from reliable_messaging._field_crypto import without_encrypted
from reliable_messaging._scheduled import move_due_messages
from reliable_messaging._topology import consumers
from reliable_messaging.models import OutboxMessage

__all__ = [
    "Decision",
    "Delivered",
    "Outcome",
    "PublishedEvent",
    "advance_time",
    "assert_no_second_effect",
    "deliver",
    "example_payload",
    "published",
    # For a test's own in-process bus (a fault library's): a delivery decided as the consumer loop
    # decides it, the relay's envelope and attempt header, a spent retry stored as a dead letter.
    "ATTEMPT_HEADER",
    "Envelope",
    "dead_letter_record",
    "decide",
    "envelope_for_outbox",
    # For checks over what the outbox holds: the known schemas, and why a payload is not a version
    # (a stored one judged without its encrypted fields, as publish() judged it before encrypting).
    "schemas",
    "validation_error",
    "without_encrypted",
    # For a test that starts with a quiet broker.
    "topology_queues",
]


class PublishedEvent(NamedTuple):
    """An event in the outbox, as a test compares it (a plain tuple compares equal too)."""

    event_type: str
    version: int
    payload: dict[str, Any]


@dataclass(frozen=True)
class Delivered:
    """What one delivery did: its decision and the events its handler published."""

    decision: Decision
    published: list[PublishedEvent] = field(default_factory=list)

    @property
    def outcome(self) -> Outcome:
        return self.decision.outcome

    @property
    def reason(self) -> str:
        """Why it was not handled: a code (``invalid_payload``, ``unknown_event`` ...)."""
        return self.decision.reason

    @property
    def error(self) -> str:
        """What was wrong, as the dead letter records it (the schema's words, the handler's error)."""
        return self.decision.error


def deliver(
    consumer: str,
    event_type: str,
    payload: dict[str, Any],
    *,
    message_id: str | None = None,
    correlation_id: str = "",
    schema_version: int = 1,
) -> Delivered:
    """``payload`` as ``event_type`` v``schema_version`` to ``consumer``'s handler."""
    message_id = message_id or str(uuid.uuid4())
    before = set(OutboxMessage.objects.filter(causation_id=message_id).values_list("id", flat=True))
    decision = decide(
        consumer,
        body=json.dumps(payload).encode(),
        properties={"message_id": message_id, "correlation_id": correlation_id},
        headers={"event_type": event_type, "schema_version": schema_version},
        routing_key=event_type,
    )
    # The bus names the message being handled as the cause of every event its handler publishes.
    caused = OutboxMessage.objects.filter(causation_id=message_id).exclude(id__in=before).order_by("created_at", "id")
    return Delivered(decision, [_event(row) for row in caused])


def published(source: str, *, correlation_id: str | None = None) -> list[PublishedEvent]:
    """What ``source`` (a context) wrote to the outbox, oldest first, of one saga if
    ``correlation_id`` is given."""
    rows = OutboxMessage.objects.filter(source=source).order_by("created_at", "id")
    if correlation_id is not None:
        rows = rows.filter(correlation_id=correlation_id)
    return [_event(row) for row in rows]


def advance_time(by: timedelta) -> list[PublishedEvent]:
    """Scheduled messages due within ``by`` from now move into the outbox (as the relay moves them
    when their time comes); the events moved, in the order they fall due."""
    moved_before = set(OutboxMessage.objects.values_list("id", flat=True))
    while move_due_messages(now=timezone.now() + by):
        pass
    moved = OutboxMessage.objects.exclude(id__in=moved_before).order_by("created_at", "id")
    return [_event(row) for row in moved]


def assert_no_second_effect(
    consumer: str,
    event_type: str,
    payload: dict[str, Any],
    effect: Callable[[], Any],
    *,
    correlation_id: str = "",
    schema_version: int = 1,
) -> Delivered:
    """Deliver the message twice (same message id); ``effect()`` reads what the handler changes
    (rows, counts, a stock level). Fails unless the first delivery is handled, the second is a
    duplicate, and nothing ``effect()`` reads or the outbox holds changed in between. The first
    delivery is returned."""
    message_id = str(uuid.uuid4())
    first = deliver(
        consumer,
        event_type,
        payload,
        message_id=message_id,
        correlation_id=correlation_id,
        schema_version=schema_version,
    )
    assert first.outcome is Outcome.HANDLED, f"the first delivery was {first.outcome.value}: {first.reason}"
    after_first, outbox_after_first = effect(), OutboxMessage.objects.count()
    again = deliver(
        consumer,
        event_type,
        payload,
        message_id=message_id,
        correlation_id=correlation_id,
        schema_version=schema_version,
    )
    assert again.outcome is Outcome.DUPLICATE, f"the second delivery was {again.outcome.value}, not a duplicate"
    assert effect() == after_first, "the second delivery changed what effect() reads"
    assert OutboxMessage.objects.count() == outbox_after_first and again.published == [], "it published again"
    return first


def _event(row: OutboxMessage) -> PublishedEvent:
    """The row as a test compares it, checked as ``publish`` checks what it writes (a row written
    past it, by SQL or a fixture, fails the test that reads it). An encrypted field is as stored,
    ``{"$encrypted": ...}``, and checked by ``publish`` before it was encrypted."""
    if refusal := publish_refusal(row.event_type, row.schema_version, without_encrypted(row.payload)):
        raise AssertionError(f"the outbox holds an event no consumer would take: {refusal}")
    return PublishedEvent(row.event_type, row.schema_version, row.payload)


def example_payload(event_type: str, version: int | None = None) -> dict[str, Any]:
    """The smallest payload of ``event_type`` (its newest version unless given) that its schema
    accepts: each required property, a fresh uuid where one is asked for, the system's currency,
    an enum's first value. ``AssertionError`` names what a schema asks that this cannot make."""
    version = version or newest_version(event_type)
    known = schemas().get((event_type, version))
    if known is None:
        raise AssertionError(f"no schema for {event_type} v{version} among the installed contexts")
    payload: dict[str, Any] = _example(known.schema)
    if problem := validation_error(event_type, version, payload):
        raise AssertionError(f"example_payload cannot make one: {problem}; write the payload by hand")
    return payload


def _example(schema: dict[str, Any]) -> Any:
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        return {name: _example(properties.get(name, {})) for name in schema.get("required", [])}
    if kind == "array":
        return [_example(schema.get("items", {})) for _ in range(max(1, schema.get("minItems", 1)))]
    if kind in ("integer", "number"):
        return max(1, schema.get("minimum", 1), schema.get("exclusiveMinimum", 0) + 1)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return _example_string(schema)


def _example_string(schema: dict[str, Any]) -> str:
    if schema.get("format") == "uuid":
        return str(uuid.uuid4())
    if schema.get("format") == SYSTEM_CURRENCY:
        currency: str = setting("CURRENCY")
        return currency
    pattern = schema.get("pattern")
    for candidate in ("x", "1.00", "1", setting("CURRENCY"), "X1"):
        if len(candidate) >= schema.get("minLength", 0) and (not pattern or re.search(pattern, candidate)):
            return candidate
    return "x"


def topology_queues(connection: Connection) -> dict[str, list[Queue]]:
    """Declare the topology on ``connection`` (a kombu connection); each consumer's queues: its main
    queue first, then its dead-letter queue and its delay queues (what a test purges between tests)."""
    broker.declare_topology(connection)
    return {
        consumer: [broker.main_queue(consumer), broker.dead_letter_queue(consumer), *broker.retry_queues(consumer)]
        for consumer in consumers()
    }
