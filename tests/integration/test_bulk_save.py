"""kernel.bulk.bulk_save: the bulk transitions' write, as save(update_fields=...) would leave each row."""

import uuid
from decimal import Decimal

import pytest

from inventory.models import Product, Reservation
from kernel.bulk import bulk_save
from payments.models import Payment

pytestmark = pytest.mark.django_db


def test_the_fields_given_are_written_row_by_row_and_auto_now_is_now():
    payments = [Payment.objects.create(order_id=uuid.uuid4()) for _ in range(3)]
    untouched = Payment.objects.create(order_id=uuid.uuid4(), token="tok_keep")
    before = {p.order_id: (p.created_at, p.updated_at) for p in payments}
    payments[0].status, payments[0].amount, payments[0].items = "charging", Decimal("12.34"), [{"sku": "WÍDGET"}]
    payments[1].status, payments[1].causes = "charged", {"charge": {"message_id": "m-1"}}
    payments[2].status, payments[2].token = "declined", "tok_not_among_the_fields"

    bulk_save(payments, ["status", "amount", "items", "causes", "updated_at"])

    stored = {p.order_id: p for p in Payment.objects.all()}
    for payment in payments:
        row = stored[payment.order_id]
        assert (row.status, row.amount, row.items, row.causes, row.updated_at) == (
            payment.status, payment.amount, payment.items, payment.causes, payment.updated_at,
        )  # fmt: skip
        assert row.updated_at > before[payment.order_id][1]  # auto_now, on the object too
        assert row.created_at == payment.created_at == before[payment.order_id][0]  # in the row and in memory
    assert stored[payments[2].order_id].token == ""  # not among the fields: left as it was
    assert stored[untouched.order_id].token == "tok_keep"
    assert Payment.objects.count() == 4  # nothing inserted


def test_one_statement_for_the_lot(django_assert_num_queries):
    payments = [Payment.objects.create(order_id=uuid.uuid4()) for _ in range(3)]
    for payment in payments:
        payment.status = "voided"

    with django_assert_num_queries(1):
        bulk_save(payments, ["status", "updated_at"])
    assert list(Payment.objects.values_list("status", flat=True).distinct()) == ["voided"]


def test_an_auto_now_field_not_given_is_left_in_the_row_and_on_the_object():
    product = Product.objects.create(sku="S", name="S", price=Decimal("1.00"), stock=1)
    stamped = product.updated_at
    product.stock = 0

    bulk_save([product], ["stock"])

    assert product.updated_at == stamped == Product.objects.get().updated_at
    assert Product.objects.get().stock == 0


def test_nothing_to_write_is_no_query(django_assert_num_queries):
    with django_assert_num_queries(0):
        bulk_save([], ["status"])


def test_rows_of_two_models_are_refused():
    product = Product.objects.create(sku="S", name="S", price=Decimal("1.00"), stock=1)
    reservation = Reservation.objects.create(order_id=uuid.uuid4())

    with pytest.raises(TypeError) as refused:
        bulk_save([product, reservation], ["updated_at"])
    assert str(refused.value) == "bulk_save() takes rows of one model: Product, not Reservation"


def test_a_new_row_is_refused():
    with pytest.raises(ValueError) as refused:
        bulk_save([Payment(order_id=uuid.uuid4())], ["status"])
    assert str(refused.value) == "bulk_save() writes Payment rows read from the database, not new ones"
    assert Payment.objects.count() == 0
