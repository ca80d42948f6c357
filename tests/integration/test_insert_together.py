"""kernel.bulk.insert_together: new rows of several models in one statement, left as
save(force_insert=True) and bulk_create leave them."""

import uuid
from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from kernel.bulk import insert_together
from orders.models import CheckoutRequest, Order, OrderLine

pytestmark = pytest.mark.django_db


def new_order(**fields) -> Order:
    return Order(
        id=uuid.uuid4(), customer_id="c-1", status=Order.Status.PENDING, total=Decimal("3.75"), currency="USD",
        saga_style="choreography", ship_to="FR", created_at=timezone.now(), **fields,
    )  # fmt: skip


def key_row(request_hash: str, order: Order) -> CheckoutRequest:
    return CheckoutRequest(
        key="k", request_hash=request_hash, response_status=201, response_body={}, order_id=order.id,
        created_at=timezone.now(),
    )  # fmt: skip


def test_an_order_and_its_lines_are_one_statement_and_come_back_as_written(django_assert_num_queries):
    order = new_order()
    lines = [
        OrderLine(order=order, sku="A", quantity=1, unit_price=Decimal("1.25")),
        OrderLine(order=order, sku="B", quantity=2, unit_price=Decimal("1.25")),
    ]
    before = timezone.now()

    with django_assert_num_queries(1):
        insert_together([order], lines)

    stored = Order.objects.get()
    assert before <= order.updated_at <= timezone.now()  # auto_now, stamped on the object
    assert (stored.id, stored.updated_at, stored.created_at, stored.total, stored.ship_to, stored.paid_at) == (
        order.id, order.updated_at, order.created_at, Decimal("3.75"), "FR", None,
    )  # fmt: skip
    # The database's keys are on the objects, in the order the lines were given.
    assert [(line.id, line.sku) for line in lines] == list(OrderLine.objects.order_by("id").values_list("id", "sku"))
    assert lines[0].id < lines[1].id
    assert not any(obj._state.adding for obj in (order, *lines))  # saved: a later save() updates
    order.status = Order.Status.CONFIRMED
    order.save(update_fields=["status"])
    assert Order.objects.get().status == "CONFIRMED"


def test_a_taken_key_fails_the_statement_and_writes_nothing():
    order = new_order()
    insert_together([order])
    insert_together([key_row("h", order)])
    other = new_order()
    again = key_row("h2", other)

    with pytest.raises(IntegrityError), transaction.atomic():
        insert_together([other], [again])

    assert list(Order.objects.values_list("id", flat=True)) == [order.id]  # not `other`
    assert list(CheckoutRequest.objects.values_list("key", "request_hash")) == [("k", "h")]


def test_empty_groups_are_skipped_and_nothing_is_no_statement(django_assert_num_queries):
    with django_assert_num_queries(0):
        insert_together([], [])
    order = new_order()
    with django_assert_num_queries(1):
        insert_together([order], [])
    assert Order.objects.count() == 1


def test_a_group_of_two_models_is_refused():
    order = new_order()
    with pytest.raises(TypeError) as refused:
        insert_together([order, OrderLine(order=order, sku="A", quantity=1, unit_price=Decimal("1"))])
    assert str(refused.value) == "insert_together() takes one model per group: Order, not OrderLine"
    assert Order.objects.count() == 0


def test_a_group_with_some_keys_set_and_some_not_is_refused():
    order = new_order()
    insert_together([order])
    lines = [
        OrderLine(id=10, order=order, sku="A", quantity=1, unit_price=Decimal("1")),
        OrderLine(order=order, sku="B", quantity=1, unit_price=Decimal("1")),
    ]
    with pytest.raises(ValueError) as refused:
        insert_together(lines)
    assert str(refused.value) == "insert_together(): every OrderLine row needs its primary key set, or none"
    assert OrderLine.objects.count() == 0
