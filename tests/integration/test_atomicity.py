"""The order and its event are one write: a failure after the business write leaves neither."""

from decimal import Decimal

import pytest
from reliable_messaging._sql import execute_together as real_execute_together
from reliable_messaging.models import OutboxMessage

from orders.models import Order, OrderLine, StorefrontProduct
from orders.services import checkout as checkout_service
from tests.conftest import ALL_DATABASES


class Boom(Exception):
    pass


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_an_error_after_the_outbox_write_leaves_neither_order_nor_event(monkeypatch):
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("1.00"), available=1, version=1)

    def write_then_fail(statements):
        real_execute_together(statements)
        assert OutboxMessage.objects.count() == 1 and Order.objects.count() == 1  # both written...
        raise Boom

    monkeypatch.setattr(checkout_service, "execute_together", write_then_fail)
    with pytest.raises(Boom):
        checkout_service.order_place(
            customer_id="c", lines=[checkout_service.Line("WIDGET", 1)], payment_token="tok_visa"
        )

    assert (Order.objects.count(), OrderLine.objects.count(), OutboxMessage.objects.count()) == (0, 0, 0)
