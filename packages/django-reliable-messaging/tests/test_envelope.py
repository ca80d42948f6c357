"""The wire format: what the relay puts on a message, and what a consumer accepts from one."""

import json
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from types import SimpleNamespace

import pytest
from reliable_messaging._envelope import (
    ATTEMPT_HEADER,
    InvalidMessage,
    encode_body,
    envelope_for_outbox,
    parse_incoming,
)
from reliable_messaging.api import InvalidPayload, payload_uuid

EVENT_ID = uuid.UUID("01a20ecf-ec79-780c-9868-25f1453339fe")
HEADERS = {"event_type": "notes.note.written", "schema_version": 1}


def outbox_row(**changes) -> SimpleNamespace:
    row = {
        "event_id": EVENT_ID,
        "event_type": "notes.note.written",
        "schema_version": 2,
        "created_at": datetime(2026, 11, 24, 18, 0, tzinfo=UTC),
        "source": "notes",
        "causation_id": "",
        "traceparent": "",
        "payload": {"order_id": "o-1", "total": Decimal("19.99")},
        "correlation_id": "o-1",
    }
    return SimpleNamespace(**{**row, **changes})


def test_an_outbox_row_becomes_a_persistent_json_message_keyed_by_its_event_id():
    envelope = envelope_for_outbox(outbox_row(), "ecommerce_events")

    assert (envelope.message_id, envelope.exchange, envelope.routing_key) == (
        str(EVENT_ID),
        "ecommerce_events",
        "notes.note.written",
    )
    assert envelope.body == b'{"order_id":"o-1","total":"19.99"}'
    assert envelope.headers == {
        "event_type": "notes.note.written",
        "schema_version": 2,
        "occurred_at": "2026-11-24T18:00:00+00:00",
        "source": "notes",
    }
    assert envelope.properties == {
        "message_id": str(EVENT_ID),
        "correlation_id": "o-1",
        "content_type": "application/json",
        "content_encoding": "utf-8",
        "delivery_mode": 2,
    }


def test_a_cause_and_a_trace_travel_as_headers_only_when_there_are_some():
    envelope = envelope_for_outbox(outbox_row(causation_id="c-1", traceparent="00-t-s-01"), "x")

    assert (envelope.headers["causation_id"], envelope.headers["traceparent"]) == ("c-1", "00-t-s-01")


def test_a_well_formed_message_is_read_with_every_field_of_its_envelope():
    at = "2026-11-25T08:00:00+00:00"
    headers = {**HEADERS, "causation_id": "c-1", "occurred_at": at, "traceparent": "tp", ATTEMPT_HEADER: 3}
    event = parse_incoming(
        encode_body({"order_id": "o-1"}), {"message_id": EVENT_ID, "correlation_id": "o-1"}, headers, "rk"
    )

    assert (event.message_id, event.event_type, event.schema_version, event.payload) == (
        str(EVENT_ID),
        "notes.note.written",
        1,
        {"order_id": "o-1"},
    )
    assert (event.correlation_id, event.causation_id, event.occurred_at, event.traceparent) == ("o-1", "c-1", at, "tp")
    assert (event.routing_key, event.attempt, event.headers) == ("rk", 3, headers)


def test_a_message_without_optional_headers_is_a_first_attempt_with_empty_fields():
    event = parse_incoming(b"{}", {"message_id": "m"}, {"event_type": "x.y.z"}, "x.y.z")

    assert (event.schema_version, event.attempt, event.correlation_id, event.causation_id) == (1, 1, "", "")


@pytest.mark.parametrize(
    ("body", "properties", "headers", "reason"),
    [
        (b"{}", {}, HEADERS, "missing_message_id"),
        (b"{}", {"message_id": ""}, HEADERS, "missing_message_id"),
        (b"{}", {"message_id": "m"}, {}, "missing_event_type"),
        (b"{}", {"message_id": "m"}, {"event_type": 7}, "missing_event_type"),
        (b"{}", {"message_id": "m"}, {**HEADERS, "schema_version": "two"}, "invalid_schema_version"),
        (b"not json", {"message_id": "m"}, HEADERS, "undecodable_body"),
        (b"\xff\xfe", {"message_id": "m"}, HEADERS, "undecodable_body"),
        (json.dumps([1, 2]).encode(), {"message_id": "m"}, HEADERS, "undecodable_body"),
    ],
)
def test_a_message_that_can_never_be_handled_is_refused_with_its_reason(body, properties, headers, reason):
    with pytest.raises(InvalidMessage) as refused:
        parse_incoming(body, properties, headers, "rk")

    assert refused.value.reason == reason
    assert str(refused.value).startswith(f"{reason}: ")


def test_a_payload_uuid_is_read_or_refused_naming_its_field():
    order_id = uuid.uuid4()
    event = parse_incoming(encode_body({"order_id": str(order_id), "other": "x"}), {"message_id": "m"}, HEADERS, "rk")

    assert payload_uuid(event, "order_id") == order_id
    with pytest.raises(InvalidPayload, match=r"^other missing or not a UUID: badly formed hexadecimal UUID string$"):
        payload_uuid(event, "other")
    with pytest.raises(InvalidPayload, match=r"^shipment_id missing or not a UUID: 'shipment_id'$"):
        payload_uuid(event, "shipment_id")
