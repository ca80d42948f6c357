"""The order and its event are one write: a failure after the business write leaves neither. The rows
one checkout writes, exactly; and its writer (write_order_together) writes what the plain ORM's
(write_order, the reference) writes."""

from decimal import Decimal

import pytest
from django.utils import timezone
from reliable_messaging.models import OutboxMessage

from orders.models import CheckoutRequest, Order, OrderLine, StorefrontProduct
from orders.services.checkout import Line, checkout, request_fingerprint, write_order, write_order_together

BODY = {"customer_id": "c", "items": [{"sku": "WIDGET", "quantity": 2}], "payment_token": "tok_visa"}


class Boom(Exception):
    pass


@pytest.fixture(autouse=True)
def storefront():
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("1.25"), available=9, version=1)
    StorefrontProduct.objects.create(sku="GADGET", name="Gadget", price=Decimal("10.00"), available=9, version=1)


def columns(obj) -> dict:
    """Every column of ``obj``'s row, as the object holds it (``model_to_dict`` leaves out the
    fields that are not editable, ``updated_at`` among them)."""
    return {field.attname: getattr(obj, field.attname) for field in obj._meta.concrete_fields}


def rows() -> tuple[int, ...]:
    """How many orders, lines, outbox rows and checkout keys there are."""
    return tuple(model.objects.count() for model in (Order, OrderLine, OutboxMessage, CheckoutRequest))


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_crash_after_the_order_is_written_leaves_no_order_no_event_and_no_key():
    def write_then_crash(order, lines, events):
        write_order(order, lines, events)
        assert rows()[:3] == (1, 1, 1)  # the order, its line and its event, written in the transaction...
        raise Boom

    with pytest.raises(Boom):
        checkout(
            key="k", request_hash=request_fingerprint(BODY), customer_id="c",
            lines=[Line("WIDGET", 2)], payment_token="tok_visa", write=write_then_crash,
        )  # fmt: skip

    assert rows() == (0, 0, 0, 0)  # ...and none of them, nor the key, once it failed
    again = checkout(
        key="k", request_hash=request_fingerprint(BODY), customer_id="c",
        lines=[Line("WIDGET", 2)], payment_token="tok_visa",
    )  # fmt: skip
    assert (again.status, again.replayed, rows()) == (201, False, (1, 1, 1, 1))  # the key was free


@pytest.mark.django_db(databases="__all__")
def test_one_checkout_writes_the_order_its_lines_its_event_and_its_key_exactly():
    body = {**BODY, "items": [{"sku": "WIDGET", "quantity": 2}, {"sku": "GADGET", "quantity": 1}]}
    before = timezone.now()

    result = checkout(
        key="k-1", request_hash=request_fingerprint(body), customer_id="c-7",
        lines=[Line("WIDGET", 2), Line("GADGET", 1)], payment_token="tok_visa", ship_to="FR",
    )  # fmt: skip

    order = Order.objects.get()
    assert before <= order.created_at <= order.updated_at <= timezone.now()
    assert (order.customer_id, order.status, order.failure_reason, order.total, order.currency) == (
        "c-7", "PENDING", None, Decimal("12.50"), "USD",
    )  # fmt: skip
    assert (order.paid_at, order.saga_style, order.ship_to) == (None, "choreography", "FR")
    assert list(OrderLine.objects.order_by("sku").values_list("order_id", "sku", "quantity", "unit_price")) == [
        (order.id, "GADGET", 1, Decimal("10.00")),
        (order.id, "WIDGET", 2, Decimal("1.25")),
    ]
    event = OutboxMessage.objects.get()
    assert (event.event_type, event.source, event.aggregate_type, event.aggregate_id, event.correlation_id) == (
        "orders.order.created", "orders", "order", str(order.id), str(order.id),
    )  # fmt: skip
    assert (event.schema_version, event.created_at, event.published_at, event.attempts) == (
        4, order.created_at, None, 0,
    )  # fmt: skip
    sealed = event.payload.pop("payment_token")["$encrypted"]  # for payments alone
    assert (sorted(sealed), sealed["for"], sealed["kid"]) == (["ct", "for", "kid"], ["payments"], "development")
    customer = event.payload.pop("customer_id")["$encrypted"]  # under the customer's own key, for no consumer
    assert (sorted(customer), customer["for"], customer["sub"][:8]) == (["ct", "for", "sub"], [], "subject-")
    assert event.payload == {
        "order_id": str(order.id),
        "total": {"amount": "12.50", "currency": "USD"},
        "items": [
            {"sku": "WIDGET", "quantity": 2, "unit_price": {"amount": "1.25", "currency": "USD"}},
            {"sku": "GADGET", "quantity": 1, "unit_price": {"amount": "10.00", "currency": "USD"}},
        ],
        "saga_style": "choreography",
        "ship_to": "FR",
    }
    key = CheckoutRequest.objects.get()
    assert (key.key, key.request_hash, key.response_status, key.order_id, key.created_at) == (
        "k-1", request_fingerprint(body), 201, order.id, order.created_at,
    )  # fmt: skip
    assert key.response_body == result.body
    assert (result.body["id"], result.body["created_at"], result.body["updated_at"]) == (
        str(order.id),
        order.created_at.isoformat().replace("+00:00", "Z"),
        order.updated_at.isoformat().replace("+00:00", "Z"),
    )
    [created] = result.body["timeline"]
    assert (created["message_id"], created["occurred_at"]) == (str(event.event_id), result.body["created_at"])


@pytest.mark.django_db(databases="__all__")
def test_the_writer_checkout_uses_writes_the_rows_the_plain_orm_writes():
    """A checkout of two lines through each writer: every column of the rows, and every field of the
    objects each writer leaves behind, compared."""
    written = {}
    for writer in (write_order, write_order_together):
        left = []

        def write(order, lines, events, writer=writer, left=left):
            writer(order, lines, events)
            left.extend([order, *lines])

        checkout(
            key=writer.__name__, request_hash="h", customer_id="c-7", lines=[Line("WIDGET", 2), Line("GADGET", 1)],
            payment_token="tok_visa", ship_to="FR", write=write,
        )  # fmt: skip
        order, *lines = left
        row = Order.objects.get(id=order.id)
        stored_lines = list(OrderLine.objects.filter(order=order).order_by("id"))
        assert columns(row) == columns(order)  # what is in memory is what was written
        assert [columns(line) for line in stored_lines] == [columns(line) for line in lines]
        assert not any(obj._state.adding for obj in left)  # saved: a later save() updates
        event = OutboxMessage.objects.get(aggregate_id=str(order.id))
        written[writer.__name__] = (
            {k: v for k, v in columns(row).items() if k not in ("id", "created_at", "updated_at")},
            [(line.sku, line.quantity, line.unit_price) for line in stored_lines],
            (event.event_type, event.schema_version, event.correlation_id == str(order.id), sorted(event.payload)),
        )
    assert written["write_order_together"] == written["write_order"]
    assert written["write_order"][1] == [("WIDGET", 2, Decimal("1.25")), ("GADGET", 1, Decimal("10.00"))]
