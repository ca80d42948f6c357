"""The wire format: AMQP properties and headers of an event, and their parsing on arrival.

Every message: ``message_id`` = the event's UUID (the same on every re-publish),
``correlation_id`` = the id that ties one saga's events together (chosen by the producer),
JSON body, persistent, and
headers ``event_type``, ``schema_version``, ``causation_id``, ``occurred_at``. A payload stored
apart (``reliable_messaging._claim_check``) leaves the body ``{}`` and adds ``x-claim-check``.
"""

import hashlib
import json
import math
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn, Protocol

from django.core.serializers.json import DjangoJSONEncoder

from reliable_messaging import _claim_check as claim_check
from reliable_messaging._amqp_properties import COMPRESSED, OVERSIZED, UNDECODABLE
from reliable_messaging._edge import (
    ATTEMPT_HEADER,
    InvalidMessage,
    attempt_of,
    event_type_checked,
    occurred_at_of,
    refuse_deep_body,
    refuse_unstorable,
    schema_version_of,
)

CONTENT_TYPE = "application/json"
__all__ = ["ATTEMPT_HEADER", "Envelope", "IncomingEvent", "InvalidMessage", "encode_body", "parse_incoming"]


@dataclass(frozen=True)
class Envelope:
    """One message ready to publish."""

    message_id: str
    exchange: str
    routing_key: str
    body: bytes
    correlation_id: str
    headers: dict[str, Any]

    @property
    def properties(self) -> dict[str, Any]:
        return {
            "message_id": self.message_id,
            "correlation_id": self.correlation_id,
            "content_type": CONTENT_TYPE,
            "content_encoding": "utf-8",
            "delivery_mode": 2,
        }


def encode_body(payload: Any) -> bytes:
    return json.dumps(payload, cls=DjangoJSONEncoder, separators=(",", ":")).encode()


class OutboxRow(Protocol):
    """What a message is made of: an outbox row as the relay claims it (a named row), or the model's."""

    @property
    def event_id(self) -> uuid.UUID: ...
    @property
    def source(self) -> str: ...
    @property
    def event_type(self) -> str: ...
    @property
    def schema_version(self) -> int: ...
    @property
    def correlation_id(self) -> str: ...
    @property
    def causation_id(self) -> str: ...
    @property
    def traceparent(self) -> str: ...
    @property
    def payload(self) -> Any: ...
    @property
    def created_at(self) -> datetime: ...


def envelope_for_outbox(
    row: OutboxRow,
    exchange: str,
    trace: dict[str, str] | None = None,
    *,
    body: bytes | None = None,
    stored: dict[str, Any] | None = None,
) -> Envelope:
    """The message of an outbox row; ``trace`` (the relay's PRODUCER span) replaces the row's own
    ``traceparent``/``tracestate`` (the span it was written in) when given. ``body``: the payload
    already encoded; ``stored``: its claim check, when it is stored apart (the body is then ``{}``)."""
    headers = {
        "event_type": row.event_type,
        "schema_version": row.schema_version,
        "occurred_at": row.created_at.isoformat(),
        "source": row.source,
    }
    if row.causation_id:
        headers["causation_id"] = row.causation_id
    if trace is None:
        trace = {"traceparent": row.traceparent, "tracestate": getattr(row, "tracestate", "")}
    headers.update({name: value for name, value in trace.items() if value})
    if stored is not None:
        headers[claim_check.HEADER] = stored
    return Envelope(
        message_id=str(row.event_id),
        exchange=exchange,
        routing_key=row.event_type,
        body=claim_check.BODY if stored is not None else body if body is not None else encode_body(row.payload),
        correlation_id=row.correlation_id,
        headers=headers,
    )


@dataclass(frozen=True)
class IncomingEvent:
    """A message as a handler sees it."""

    message_id: str
    event_type: str
    schema_version: int
    payload: dict[str, Any]
    correlation_id: str = ""
    causation_id: str = ""
    occurred_at: str = ""
    traceparent: str = ""
    routing_key: str = ""
    attempt: int = 1
    headers: dict[str, Any] = field(default_factory=dict)
    # What the inbox keeps of the message as it arrived (before any upcast): see ``content_hash``.
    content_hash: str = ""


def parse_incoming(body: bytes, properties: dict[str, Any], headers: dict[str, Any], routing_key: str) -> IncomingEvent:
    """Check the envelope and decode the body, or raise ``InvalidMessage`` (``reliable_messaging._edge``)."""
    if OVERSIZED in headers:  # only a prefix of the body is here (reliable_messaging._amqp_properties)
        raise InvalidMessage("payload_too_large", str(headers[OVERSIZED])[:500])
    if UNDECODABLE in headers:
        raise InvalidMessage("invalid_headers", f"its properties could not be decoded: {headers[UNDECODABLE]}")
    if COMPRESSED in headers:
        raise InvalidMessage("invalid_headers", f"its body is compressed ({headers[COMPRESSED]}): the bus reads none")
    message_id = properties.get("message_id")
    if not message_id or not isinstance(message_id, str | uuid.UUID):
        raise InvalidMessage("missing_message_id", "the message has no message_id, so it cannot be deduplicated")
    event_type = headers.get("event_type")
    if not event_type or not isinstance(event_type, str):
        raise InvalidMessage("missing_event_type", "the message has no event_type header")
    event_type_checked(event_type)
    schema_version = schema_version_of(headers)
    attempt = attempt_of(headers)
    occurred_at = occurred_at_of(headers)
    refuse_unstorable(str(message_id), properties.get("correlation_id"), headers.get("causation_id"))
    if claim_check.HEADER in headers:  # before any transaction: the payload it names, checked
        try:
            body = claim_check.fetch(
                headers[claim_check.HEADER], event_type=event_type, message_id=str(message_id), headers=headers
            )
        except claim_check.StorageUnavailable as exc:  # what a consumer needs to retry it
            exc.event = IncomingEvent(
                str(message_id),
                event_type,
                schema_version,
                {},
                routing_key=routing_key,
                attempt=attempt,
                correlation_id=str(properties.get("correlation_id") or ""),
                headers=dict(headers),
            )
            raise
    refuse_deep_body(body)
    try:
        payload = json.loads(body, parse_constant=_non_finite, parse_float=_finite_float)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidMessage("undecodable_body", f"the body is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise InvalidMessage("undecodable_body", "the body is not a JSON object")
    return IncomingEvent(
        message_id=str(message_id),
        event_type=event_type,
        schema_version=schema_version,
        payload=payload,
        correlation_id=str(properties.get("correlation_id") or ""),
        causation_id=str(headers.get("causation_id") or ""),
        occurred_at=occurred_at,
        traceparent=str(headers.get("traceparent") or ""),
        routing_key=routing_key,
        attempt=attempt,
        headers=dict(headers),
        content_hash=content_hash(event_type, schema_version, payload),
    )


def _non_finite(constant: str) -> NoReturn:
    raise InvalidMessage("invalid_payload", f"the body holds {constant}, which is no JSON number")


def _finite_float(literal: str) -> float:
    """A number with a fraction or an exponent; 1e400 is no float (Python would read inf)."""
    value = float(literal)
    if not math.isfinite(value):
        raise InvalidMessage("invalid_payload", f"the body holds a number out of range: {literal[:40]}")
    return value


def content_hash(event_type: str, schema_version: int, payload: dict[str, Any]) -> str:
    """sha256 of the event's type, version and payload as canonical JSON: the same for every
    delivery of one event (a retry, a replay, a re-publish), whatever its bytes' key order."""
    canonical = json.dumps([event_type, schema_version, payload], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
