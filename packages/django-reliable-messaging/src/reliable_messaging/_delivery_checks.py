"""The checks a delivery passes before its handler runs. Its envelope's, with no transaction
(``checked``): well-formed, a producer allowed to publish its event type, a handler for it here.
Its payload's, in its transaction (its batch's) before its inbox claim (``readable``): its personal
fields opened with their subject keys (a batch's read in one query: ``subject_keys``), a schema
version this deployment reads, a payload its schema accepts (brought to the newest version its
reader knows). A delivery that fails one can never be handled: ``Refused``, with its dead letter."""

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from reliable_messaging import _contracts as contracts
from reliable_messaging import _registry as registry
from reliable_messaging._claim_check import StorageUnavailable
from reliable_messaging._decisions import Decision, Outcome, failure
from reliable_messaging._envelope import IncomingEvent, InvalidMessage, parse_incoming
from reliable_messaging._field_crypto import SubjectErased, Undecryptable, reveal_for
from reliable_messaging._producers import UNAUTHENTICATED, producer_refusal
from reliable_messaging._readings import Reading
from reliable_messaging._subject_keys import subject_keys_of
from reliable_messaging._topology import EVENT_LOG_CONSUMER
from reliable_messaging.models import SubjectKey


class Refused(Exception):
    """A message that can never be handled, with the decision about it (a dead letter)."""

    def __init__(self, decision: Decision):
        super().__init__(decision.reason)
        self.decision = replace(decision, refused=True)


class Prepared(NamedTuple):
    event: IncomingEvent
    spec: registry.HandlerSpec


def prepare(
    consumer: str, body: bytes, properties: dict[str, Any], headers: dict[str, Any], routing_key: str
) -> Prepared:
    """The event as its handler reads it, and its handler; ``Refused`` for a message that can never
    be handled. Outside a consumer (an edited dead letter's check): a consumer reads the subject
    keys in the message's transaction (``checked``, then ``readable``)."""
    prepared = checked(consumer, body, properties, headers, routing_key)
    return readable(prepared, subject_keys([prepared]))


def checked(
    consumer: str, body: bytes, properties: dict[str, Any], headers: dict[str, Any], routing_key: str
) -> Prepared:
    """The event, its payload as it came, and its handler; ``Refused`` for a message that can never
    be handled. No database."""
    try:
        event = parse_incoming(body, properties, headers, routing_key)
    except StorageUnavailable as exc:  # no fault of the message: retried by its policy, counted by its breaker
        raise Refused(Decision(Outcome.RETRY, exc.event, exc.reason, exc.detail, transient=True)) from None
    except InvalidMessage as exc:
        raise Refused(Decision(Outcome.DEAD_LETTER, reason=exc.reason, error=exc.detail)) from None
    if refusal := producer_refusal(event.event_type, properties.get("user_id")):
        raise Refused(Decision(Outcome.DEAD_LETTER, event, UNAUTHENTICATED, refusal))
    spec = registry.handler_for(consumer, event.event_type)
    if spec is None:
        raise Refused(
            Decision(Outcome.DEAD_LETTER, event, "unknown_event_type", f"{consumer} does not handle {event.event_type}")
        )
    return Prepared(event, spec)


def subject_keys(members: Iterable[Prepared]) -> dict[str, SubjectKey]:
    """The subject keys the personal fields of ``checked`` members are sealed under: one query for
    them all, in the caller's transaction. None for the event log: it keeps ciphertext."""
    return subject_keys_of(m.event.payload for m in members if m.spec.consumer != EVENT_LOG_CONSUMER)


def readable(prepared: Prepared, keys: Mapping[str, SubjectKey]) -> Prepared:
    """A ``checked`` member as its handler reads it (``keys``: its ``subject_keys``, or its batch's);
    ``Refused`` for a message that can never be handled."""
    event, spec = prepared
    if spec.consumer != EVENT_LOG_CONSUMER:  # the event log keeps what it received: ciphertext
        try:
            event = replace(event, payload=reveal_for(spec.consumer, event.event_type, event.payload, keys))
        except Undecryptable as exc:
            reason = "subject_erased" if isinstance(exc, SubjectErased) else "undecryptable"
            raise Refused(Decision(Outcome.DEAD_LETTER, event, reason, str(exc))) from None
    if spec.schema_versions and event.schema_version not in spec.schema_versions:
        raise Refused(Decision(Outcome.DEAD_LETTER, event, "unsupported_schema_version", _unsupported(spec, event)))
    if (reading := spec.reading) is not None:
        return _read(spec, reading, event)
    return Prepared(event, spec)


def _unsupported(spec: registry.HandlerSpec, event: IncomingEvent) -> str:
    newest = max(spec.schema_versions)
    if event.schema_version > newest:
        return (
            f"{event.event_type} v{event.schema_version} is newer than {spec.consumer} reads (v1..v{newest}): "
            f"upgrade this deployment, then replay this dead letter (docs/evolving-events.md)"
        )
    return f"{event.event_type} has no version {event.schema_version}: {spec.consumer} reads v1..v{newest}"


def _read(spec: registry.HandlerSpec, reading: Reading, event: IncomingEvent) -> Prepared:
    """The message checked against its schema and brought to the newest version its reader knows
    (what the handler sees); ``Refused`` with the dead letter that says why not."""
    # The payload as parse_incoming decoded it; an upcaster's result below is checked by jsonschema.
    if error := contracts.validation_error(event.event_type, event.schema_version, event.payload, decoded_json=True):
        raise Refused(Decision(Outcome.DEAD_LETTER, event, "invalid_payload", error))
    if event.schema_version == reading.newest:
        return Prepared(event, spec)
    try:
        payload = reading.upcast(event.schema_version, event.payload)
    except Exception as exc:  # noqa: BLE001 - an upcaster that cannot read a valid payload is a bug to fix, then replay
        raise Refused(failure(Outcome.DEAD_LETTER, "upcast_failed", exc, event)) from None
    upcast = replace(event, payload=payload, schema_version=reading.newest)
    if error := contracts.validation_error(upcast.event_type, upcast.schema_version, upcast.payload):
        raise Refused(
            Decision(Outcome.DEAD_LETTER, event, "upcast_failed", f"the upcast payload is not valid: {error}")
        )
    return Prepared(upcast, spec)
