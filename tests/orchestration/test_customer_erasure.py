"""``erase_customer`` after two customers' orchestrated sagas (tests/support/erasure.py): the
erased customer's id is in no table and no message, the other's order and saga untouched, an old
message of the erased customer refused as erased."""

import pytest
from django.test import override_settings

from orchestrator.models import OrderSaga
from tests.conftest import ALL_DATABASES
from tests.support.erasure import erase_one_of_two_customers

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


@override_settings(SAGA_STYLE="orchestration")
def test_an_erased_customer_is_in_no_table_and_no_message_and_another_s_saga_is_untouched():
    erase_one_of_two_customers(lambda order_id: OrderSaga.objects.get(key=order_id).state)
