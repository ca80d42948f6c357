"""``erase_customer`` after two customers' choreographed sagas (tests/support/erasure.py): the
erased customer's id is in no table and no message, the other's order and saga untouched, an old
message of the erased customer refused as erased. An order in flight keeps its customer."""

import pytest
from django.core.management import CommandError, call_command
from reliable_messaging.models import SubjectKey

from faultlib.fixtures import ALL_DATABASES
from orders.models import Order
from tests.support.erasure import ERASED, erase_one_of_two_customers, placed_for
from tests.support.token_at_rest import stocked_bus, tables_holding

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


def test_an_erased_customer_is_in_no_table_and_no_message_and_another_s_saga_is_untouched():
    erase_one_of_two_customers(lambda order_id: Order.objects.get(pk=order_id).status)


def test_a_customer_with_an_order_in_flight_is_not_erased_and_nothing_changes():
    order_id = placed_for(stocked_bus(), ERASED)  # PENDING: its saga has not run

    with pytest.raises(
        CommandError, match=f"^customer '{ERASED}' has 1 order\\(s\\) in flight \\({order_id}\\): erase once they end$"
    ):
        call_command("erase_customer", ERASED)

    assert Order.objects.get(pk=order_id).customer_id == ERASED
    assert SubjectKey.objects.filter(erased_at__isnull=True).count() == 1
    assert tables_holding(ERASED) == ["orders_checkout_request", "orders_order"]
