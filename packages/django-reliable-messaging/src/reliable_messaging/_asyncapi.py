"""The AsyncAPI 3.0 document of the events (``python manage.py asyncapi``), built from the
declarations and the schemas: one channel per routing key on the exchange, one message per
event and version (``<routing key>.v<N>``) with its payload schema and the headers every
message carries, and operations saying which context sends and which receives each.

For the contexts this deployment hosts (``CONTEXTS``): the events they send or receive; a send
names the version this deployment writes (``EVENT_VERSIONS``), a receive every version its
reader accepts. ``docs/asyncapi.yaml`` is the whole system's (a test keeps it in step).
"""

import copy
from typing import Any

import yaml

from reliable_messaging._conf import exchange_name, setting
from reliable_messaging._contracts import newest_version, pinned_versions, schemas
from reliable_messaging._declarations import hosted, installed

ASYNCAPI_VERSION = "3.0.0"


def _headers(event_type: str, version: int) -> dict[str, Any]:
    """The AMQP headers of every message (reliable_messaging/_envelope.py); the properties beside them are
    message_id (the event's id), correlation_id (the saga's id), content_type application/json."""
    return {
        "type": "object",
        "properties": {
            "event_type": {"type": "string", "const": event_type, "description": "the routing key"},
            "schema_version": {"type": "integer", "const": version, "description": "the payload's version"},
            "occurred_at": {"type": "string", "format": "date-time", "description": "when the change happened"},
            "source": {"type": "string", "description": "the publishing context"},
            "causation_id": {"type": "string", "description": "the message id of the event that caused it"},
            "traceparent": {"type": "string", "description": "W3C trace context"},
            "x-attempt": {"type": "integer", "minimum": 1, "description": "the delivery attempt, on a retry"},
        },
        "required": ["event_type", "schema_version", "occurred_at", "source"],
    }


def _payload(schema: dict[str, Any]) -> dict[str, Any]:
    # The schemas keep to what JSON Schema 2020-12 and AsyncAPI's schema format (draft-07) share.
    payload = copy.deepcopy(schema)
    payload.pop("$schema", None)
    return payload


def _message(event_type: str, version: int, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": f"{event_type}.v{version}",
        "title": f"{event_type} version {version}",
        "summary": schema.get("description", ""),
        "contentType": "application/json",
        "headers": _headers(event_type, version),
        "payload": _payload(schema),
        "bindings": {"amqp": {"contentEncoding": "utf-8", "messageType": event_type, "bindingVersion": "0.3.0"}},
    }


def _ref(*path: str) -> dict[str, Any]:
    return {"$ref": "#/" + "/".join(path)}


def document() -> dict[str, Any]:
    known = schemas()
    here = {d.name for d in hosted()}
    senders = {e: d.name for d in installed() for e in d.publishes}
    receivers: dict[str, list[str]] = {}
    for declaration in installed():
        for event_type in declaration.consumes:
            receivers.setdefault(event_type, []).append(declaration.name)
    events = [
        e
        for e in sorted({e for e, _ in known})
        if senders.get(e) in here or any(r in here for r in receivers.get(e, []))
    ]
    exchange = exchange_name()
    channels, operations, messages = {}, {}, {}
    for event_type in events:
        versions = range(1, newest_version(event_type) + 1)
        names = [f"{event_type}.v{v}" for v in versions]
        for version, name in zip(versions, names, strict=True):
            messages[name] = _message(event_type, version, known[(event_type, version)].schema)
        channels[event_type] = {
            "address": event_type,
            "title": event_type,
            "description": f"Routing key {event_type} on the topic exchange {exchange}.",
            "messages": {name: _ref("components", "messages", name) for name in names},
            "bindings": {
                "amqp": {
                    "is": "routingKey",
                    "exchange": {"name": exchange, "type": "topic", "durable": True, "autoDelete": False},
                    "bindingVersion": "0.3.0",
                }
            },
        }
        sender = senders[event_type]
        if sender in here:
            written = f"{event_type}.v{pinned_versions().get(event_type, newest_version(event_type))}"
            operations[f"{sender}.sends.{event_type}"] = {
                "action": "send",
                "title": f"{sender} sends {event_type}",
                "summary": f"{sender} publishes {written} through its outbox (persistent, publisher confirms).",
                "channel": _ref("channels", event_type),
                "messages": [_ref("channels", event_type, "messages", written)],
            }
        for receiver in receivers.get(event_type, []):
            if receiver in here:
                operations[f"{receiver}.receives.{event_type}"] = {
                    "action": "receive",
                    "title": f"{receiver} receives {event_type}",
                    "summary": (
                        f"{receiver} reads every version from {receiver}_queue (older ones upcast to the newest); "
                        f"a newer one is a dead letter."
                    ),
                    "channel": _ref("channels", event_type),
                    "messages": [_ref("channels", event_type, "messages", name) for name in names],
                    "bindings": {"amqp": {"ack": True, "bindingVersion": "0.3.0"}},
                }
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": setting("ASYNCAPI_TITLE"),
            "version": "1.0.0",
            "description": (
                "The events the bounded contexts exchange over RabbitMQ: each event's versions, who sends and who "
                "receives them. Generated by `python manage.py asyncapi` from each context's context.toml and "
                "schemas/ (docs/evolving-events.md). Contexts: " + ", ".join(sorted(here)) + "."
            ),
        },
        "defaultContentType": "application/json",
        "servers": {
            "rabbitmq": {
                "host": "127.0.0.1:5672",
                "protocol": "amqp",
                "protocolVersion": "0.9.1",
                "description": "BROKER_URL; every message is persistent, JSON, utf-8.",
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages},
    }


def document_yaml() -> str:
    return yaml.safe_dump(document(), sort_keys=False, allow_unicode=True, width=100)
