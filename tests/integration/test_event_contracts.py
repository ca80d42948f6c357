"""Event contracts: a schema per event and version, readers of every version, writers of one,
and frozen versions (reliable_messaging/_contracts.py, reliable_messaging/_schema_freeze.py,
docs/evolving-events.md)."""

import copy
import json
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings
from reliable_messaging._contracts import (
    ContractError,
    parse_event_versions,
    read_schemas,
    reading_of,
    schemas,
    validation_error,
)
from reliable_messaging._declarations import DeclarationError, context_of, read_declaration
from reliable_messaging._dispatch import Decision, Outcome, decide
from reliable_messaging._schema_freeze import frozen_problems, write_snapshots
from reliable_messaging.models import OutboxMessage

from orders.contracts import order_created_v2_to_v1
from orders.models import StorefrontProduct
from orders.services.checkout import Line, order_place
from payments.gateway_calls import run_due_calls
from payments.models import Payment
from payments.upcasters import order_created_v1_to_v2
from tests.conftest import ALL_DATABASES

SNAPSHOTS = Path(settings.BASE_DIR) / "docs" / "schemas-snapshot"
ORDER_ID = "0190f3a4-0000-7000-8000-000000000001"
CREATED_V1 = {
    "order_id": ORDER_ID,
    "customer_id": "alice",
    "total": "39.98",
    "currency": "USD",
    "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": "19.99"}],
    "payment_token": "tok_visa",
}
CREATED_V2 = {
    "order_id": ORDER_ID,
    "customer_id": "alice",
    "total": {"amount": "39.98", "currency": "USD"},
    "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": {"amount": "19.99", "currency": "USD"}}],
    "payment_token": "tok_visa",
}


def test_every_published_event_has_a_schema_for_each_version_from_1():
    versions: dict[str, list[int]] = {}
    for event_type, version in sorted(schemas()):
        versions.setdefault(event_type, []).append(version)
    assert all(found == list(range(1, len(found) + 1)) for found in versions.values()), versions
    # The shop's own events exactly; a context added later brings its own.
    shop = {
        e: found for e, found in versions.items() if context_of(e) in ("orders", "payments", "inventory", "shipping")
    }
    assert shop == {
        "inventory.product.updated": [1],
        "inventory.stock.released": [1],
        "inventory.stock.reservation_failed": [1],
        "inventory.stock.reserved": [1],
        "orders.order.cancelled": [1],
        "orders.order.confirmed": [1],
        "orders.order.created": [1, 2],
        "orders.order.failed": [1],
        "payments.payment.failed": [1],
        "payments.payment.refunded": [1],
        "payments.payment.succeeded": [1],
        "shipping.shipment.cancelled": [1],
        "shipping.shipment.created": [1],
        "shipping.shipment.dispatched": [1],
        "shipping.shipment.refused": [1],
        "shipping.shipment.return_requested": [1],
    }


def test_a_payload_is_checked_against_its_own_version():
    assert validation_error("orders.order.created", 1, CREATED_V1) == ""
    assert validation_error("orders.order.created", 2, CREATED_V2) == ""
    assert validation_error("orders.order.created", 2, CREATED_V1) == (
        "orders.order.created v2 at total: '39.98' is not of type 'object'"
    )
    assert validation_error("orders.order.created", 1, {**CREATED_V1, "order_id": "42"}) == (
        "orders.order.created v1 at order_id: '42' is not a 'uuid'"
    )


def test_the_upcaster_and_the_downcaster_turn_one_version_into_the_other():
    assert order_created_v1_to_v2(copy.deepcopy(CREATED_V1)) == CREATED_V2
    assert order_created_v2_to_v1(copy.deepcopy(CREATED_V2)) == CREATED_V1


def test_event_versions_is_read_or_refused_with_its_reason():
    newest = {"orders.order.created": 2}.get
    assert parse_event_versions(" orders.order.created=1 ,", lambda e: newest(e, 1)) == {"orders.order.created": 1}
    for text, error in [
        ("orders.order.created=3", "orders.order.created v3 is not a version this tree writes (1..2)"),
        ("orders.order.created=0", "orders.order.created v0 is not a version this tree writes (1..2)"),
        ("orders.order.exploded=1", "orders.order.exploded v1 is not a version this tree writes (no such event)"),
        ("orders.order.created", "'orders.order.created' is not <routing key>=<version>"),
    ]:
        with pytest.raises(ContractError) as refused:
            parse_event_versions(text, lambda e: newest(e, 1))
        assert str(refused.value) == f"EVENT_VERSIONS: {error}"


# --- frozen versions ------------------------------------------------------------------------------
def test_every_schema_matches_its_committed_snapshot():
    assert frozen_problems(schemas(), SNAPSHOTS) == []


def _created_v2() -> dict:
    return json.loads((SNAPSHOTS / "orders.order.created.v2.json").read_text())


def _removed(s):
    del s["properties"]["customer_id"]


def _renamed(s):
    s["properties"]["customer"] = s["properties"].pop("customer_id")


def _retyped(s):
    s["properties"]["items"]["items"]["properties"]["quantity"]["type"] = "string"


def _required(s):
    s["properties"]["coupon"] = {"type": "string"}
    s["required"].append("coupon")


def _optional(s):
    s["properties"]["coupon"] = {"type": "string"}


@pytest.mark.parametrize(
    ("change", "problems"),
    [
        (_removed, ["/customer_id: field removed or renamed"]),
        (_renamed, ["/customer_id: field removed or renamed"]),
        (_retyped, ["/items/items/quantity: type changed from 'integer' to 'string'"]),
        (_required, ["(the payload): new required field(s) ['coupon']"]),
        (_optional, []),
    ],
)
def test_the_freeze_refuses_each_breaking_change_and_allows_an_optional_field(tmp_path, change, problems):
    write_snapshots(schemas(), tmp_path)
    changed = dict(schemas())
    known = changed[("orders.order.created", 2)]
    schema = _created_v2()
    change(schema)
    changed[("orders.order.created", 2)] = type(known)("orders.order.created", 2, schema, known.path)
    assert frozen_problems(changed, tmp_path) == [
        f"orders.order.created v2 {p}: add a version instead (docs/evolving-events.md)" for p in problems
    ]


def test_the_freeze_refuses_a_narrowed_enum_a_missing_snapshot_and_a_removed_version(tmp_path):
    write_snapshots(schemas(), tmp_path)
    changed = dict(schemas())
    known = changed[("orders.order.failed", 1)]
    schema = copy.deepcopy(known.schema)
    schema["properties"]["reason"]["enum"].remove("timeout")
    changed[("orders.order.failed", 1)] = type(known)("orders.order.failed", 1, schema, known.path)
    changed[("orders.order.failed", 2)] = type(known)("orders.order.failed", 2, schema, known.path)
    del changed[("orders.order.confirmed", 1)]
    assert frozen_problems(changed, tmp_path) == [
        "orders.order.failed v1 /reason: enum narrowed, ['timeout'] no longer allowed: "
        "add a version instead (docs/evolving-events.md)",
        "orders.order.failed.v2.json: no snapshot; run `python manage.py event_schemas --snapshot` and commit it",
        "orders.order.confirmed.v1.json: a released version's schema is gone; its readers still need it",
    ]


# --- readers of every version, writers of one (the handlers and the outbox in this process) -------
def deliver(payload: dict, version: int) -> Decision:
    """To payments, whose gateway worker then makes the charge."""
    decision = decide(
        "payments",
        body=json.dumps(payload).encode(),
        properties={"message_id": str(uuid.uuid4()), "correlation_id": ORDER_ID},
        headers={"event_type": "orders.order.created", "schema_version": version},
        routing_key="orders.order.created",
    )
    run_due_calls()
    return decision


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
@pytest.mark.parametrize(("payload", "version"), [(CREATED_V1, 1), (CREATED_V2, 2)])
def test_payments_reads_both_versions_of_an_order_and_charges_it_the_same(payload, version):
    decision = deliver(payload, version)
    assert (decision.outcome, decision.event.schema_version, decision.event.payload) == (Outcome.HANDLED, 2, CREATED_V2)
    payment = Payment.objects.get()
    assert (str(payment.order_id), payment.status, payment.amount, payment.currency) == (
        ORDER_ID,
        "charged",
        Decimal("39.98"),
        "USD",
    )
    [succeeded] = OutboxMessage.objects.all()
    assert (succeeded.event_type, succeeded.schema_version, succeeded.payload["items"]) == (
        "payments.payment.succeeded",
        1,
        [{"sku": "WIDGET", "quantity": 2, "unit_price": "19.99"}],
    )


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_a_version_newer_than_the_reader_knows_or_an_invalid_payload_is_a_dead_letter_and_changes_nothing():
    newer = deliver(CREATED_V2, 3)
    assert (newer.outcome, newer.reason, newer.error) == (
        Outcome.DEAD_LETTER,
        "unsupported_schema_version",
        "orders.order.created v3 is newer than payments reads (v1..v2): upgrade this deployment, "
        "then replay this dead letter (docs/evolving-events.md)",
    )
    invalid = deliver({**CREATED_V2, "total": {"amount": "39.98"}}, 2)
    assert (invalid.outcome, invalid.reason, invalid.error) == (
        Outcome.DEAD_LETTER,
        "invalid_payload",
        "orders.order.created v2 at total: 'currency' is a required property",
    )
    assert (Payment.objects.count(), OutboxMessage.objects.count()) == (0, 0)


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
@pytest.mark.parametrize(
    ("pin", "version", "payload"),
    [("", 2, {**CREATED_V2, "saga_style": "choreography"}), ("orders.order.created=1", 1, CREATED_V1)],
)
def test_orders_writes_the_newest_version_unless_event_versions_pins_an_older_one(pin, version, payload):
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("19.99"), available=5, version=1)
    with override_settings(MESSAGING={**settings.MESSAGING, "EVENT_VERSIONS": pin}):
        order = order_place(customer_id="alice", lines=[Line("WIDGET", 2)], payment_token="tok_visa")
    row = OutboxMessage.objects.get()
    assert (row.event_type, row.schema_version, row.payload) == (
        "orders.order.created",
        version,
        {**payload, "order_id": str(order.id)},
    )
    assert validation_error(row.event_type, row.schema_version, row.payload) == ""


# --- declarations that do not fit together stop every process at start-up -----------------------
@pytest.mark.parametrize(
    ("files", "error"),
    [
        ({}, 'x/context.toml: declare schemas = "schemas" (a JSON Schema per event)'),
        ({"x.a.b.v2.json": "{}"}, "x/schemas: x.a.b needs a schema for each version from 1, has [2]"),
        ({"x.a.b.v1.json": "{}", "x.a.c.v1.json": "{}"}, "x/schemas/x.a.c.v1.json: not <event x publishes>.v<N>.json"),
        ({"x.a.b.v1.json": '{"type": 3}'}, "x/schemas/x.a.b.v1.json: not a valid JSON Schema: 3 is not valid"),
    ],
)
def test_a_published_event_without_its_schemas_is_refused(tmp_path, files, error):
    (tmp_path / "x").mkdir()
    schemas_line = 'schemas = "schemas"\n' if files else ""
    (tmp_path / "x" / "context.toml").write_text(f'name = "x"\n{schemas_line}[publishes]\n"x.a.b" = "step"\n')
    if files:
        (tmp_path / "x" / "schemas").mkdir()
        for name, text in files.items():
            (tmp_path / "x" / "schemas" / name).write_text(text)
    with pytest.raises(ContractError) as refused:
        read_schemas(tmp_path, [read_declaration(tmp_path, "x")])
    assert str(refused.value).startswith(error)


def test_upcasters_for_an_event_not_consumed_or_too_few_are_refused(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "context.toml").write_text('name = "x"\n[upcasters]\n"y.a.b" = ["x.up.f"]\n')
    with pytest.raises(DeclarationError, match=r"^x/context.toml: upcasters 'y.a.b': not under consumes$"):
        read_declaration(tmp_path, "x")
    (tmp_path / "x" / "context.toml").write_text('name = "x"\n[consumes]\n"orders.order.created" = "x.h.on"\n')
    with pytest.raises(ContractError) as refused:
        reading_of(read_declaration(tmp_path, "x"), "orders.order.created")
    assert str(refused.value) == (
        "x/context.toml: orders.order.created has versions 1..2; its reader needs 1 upcaster(s) "
        "under [upcasters] (v1 -> v2, ...), not 0"
    )
