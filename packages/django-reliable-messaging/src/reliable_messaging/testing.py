"""A context's own tests deliver to its handlers here, in-process, with no broker.

``deliver`` hands one message to a consumer exactly as the consumer loop does
(``reliable_messaging.dispatch.decide``): the envelope and schema checks, the upcasters, the inbox (a
message id seen before is a duplicate with no second effect) and the handler, in one
transaction. ``published`` reads back what a context wrote to the outbox; ``example_payload``
makes the smallest payload an event's schema accepts. Use them inside a ``django_db`` test; a
context may import this module from its ``tests`` package only (the import contracts allow it
nothing else of messaging but ``api``).
"""

import json
import re
import uuid
from typing import Any

from reliable_messaging.conf import setting
from reliable_messaging.contracts import SYSTEM_CURRENCY, newest_version, schemas, validation_error
from reliable_messaging.dispatch import Decision, Outcome, decide
from reliable_messaging.models import OutboxMessage

__all__ = ["Decision", "Outcome", "deliver", "example_payload", "published"]


def deliver(
    consumer: str,
    event_type: str,
    payload: dict[str, Any],
    *,
    message_id: str | None = None,
    correlation_id: str = "",
    schema_version: int = 1,
) -> Decision:
    """``payload`` as ``event_type`` v``schema_version`` to ``consumer``'s handler; the decision
    (``Outcome.HANDLED``, ``DUPLICATE``, ``RETRY`` or ``DEAD_LETTER`` with its reason)."""
    return decide(
        consumer,
        body=json.dumps(payload).encode(),
        properties={"message_id": message_id or str(uuid.uuid4()), "correlation_id": correlation_id},
        headers={"event_type": event_type, "schema_version": schema_version},
        routing_key=event_type,
    )


def published(source: str, *, correlation_id: str | None = None) -> list[tuple[str, int, dict[str, Any]]]:
    """What ``source`` (a context) wrote to the outbox, oldest first, of one saga if
    ``correlation_id`` is given: (event type, version, payload)."""
    rows = OutboxMessage.objects.filter(source=source).order_by("created_at", "id")
    if correlation_id is not None:
        rows = rows.filter(correlation_id=correlation_id)
    return [(row.event_type, row.schema_version, row.payload) for row in rows]


def example_payload(event_type: str, version: int | None = None) -> dict[str, Any]:
    """The smallest payload of ``event_type`` (its newest version unless given) that its schema
    accepts: each required property, a fresh uuid where one is asked for, the system's currency,
    an enum's first value. ``AssertionError`` names what a schema asks that this cannot make."""
    version = version or newest_version(event_type)
    known = schemas().get((event_type, version))
    if known is None:
        raise AssertionError(f"no schema for {event_type} v{version} among the installed contexts")
    payload = _example(known.schema)
    if problem := validation_error(event_type, version, payload):
        raise AssertionError(f"example_payload cannot make one: {problem}; write the payload by hand")
    return payload


def _example(schema: dict) -> Any:
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


def _example_string(schema: dict) -> str:
    if schema.get("format") == "uuid":
        return str(uuid.uuid4())
    if schema.get("format") == SYSTEM_CURRENCY:
        return setting("CURRENCY")
    pattern = schema.get("pattern")
    for candidate in ("x", "1.00", "1", setting("CURRENCY"), "X1"):
        if len(candidate) >= schema.get("minLength", 0) and (not pattern or re.search(pattern, candidate)):
            return candidate
    return "x"
