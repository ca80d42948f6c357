"""What a context offers others from its own package, found by name among the installed ones:
a producer's upcasters beside its schemas (kernel/upcasters.py), a context's steps for the fault
tests (faultlib/steps.py)."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from faultlib.steps import offered
from kernel.upcasters import producer_upcaster, upcasters_in

V1 = {
    "order_id": "6f1c1a4e-0000-4000-8000-000000000001",
    "customer_id": "c",
    "total": "20.00",
    "currency": "USD",
    "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": "10.00"}],
    "payment_token": "tok_visa",
}


def test_a_reader_binds_the_producers_own_step_and_reads_v1_as_v2():
    from orchestrator.upcasters import order_created_v1_to_v2 as orchestrators
    from payments.upcasters import order_created_v1_to_v2 as payments

    assert payments is orchestrators is producer_upcaster("orders.order.created", 1)
    assert payments(V1) == {
        "order_id": V1["order_id"],
        "customer_id": "c",
        "total": {"amount": "20.00", "currency": "USD"},
        "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": {"amount": "10.00", "currency": "USD"}}],
        "payment_token": "tok_visa",
    }


def test_a_step_the_producer_does_not_keep_is_refused_naming_where_it_would_be(tmp_path):
    with pytest.raises(ImproperlyConfigured) as refused:
        producer_upcaster("orders.order.created", 4)
    assert str(refused.value) == (
        "no upcaster of orders.order.created from v4 is known here: its producer, orders, keeps its upcasters "
        "in its schemas folder's upcasters.py (UPCASTERS), which this tree must carry"
    )
    assert upcasters_in(tmp_path) == {}  # a schemas folder without the file


def test_each_step_comes_from_the_one_context_that_offers_it():
    assert offered("WAITED_FOR_PAYMENT") == "before the order's payment succeeded here"
    with pytest.raises(LookupError, match=r"^'no_such_step' is offered by no installed context: exactly one"):
        offered("no_such_step")
