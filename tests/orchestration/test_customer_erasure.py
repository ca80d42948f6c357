"""``erase_customer`` after two customers' orchestrated sagas (tests/support/erasure.py): the
erased customer's id is in no table and no message, the other's order and saga untouched, an old
message of the erased customer refused as erased; then the same on RabbitMQ with real processes,
the broker's queues read too."""

import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import Client, override_settings
from reliable_messaging.api import publish_again
from reliable_messaging.models import DeadLetter

from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import wait_until
from faultlib.saga import checkout, ledger, seed_catalog
from orchestrator.models import OrderSaga
from orders.models import Order
from tests.support.erasure import ERASED, KEPT, erase_one_of_two_customers
from tests.support.token_at_rest import queued_on_the_broker, tables_holding

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)


@override_settings(SAGA_STYLE="orchestration")
def test_an_erased_customer_is_in_no_table_and_no_message_and_another_s_saga_is_untouched():
    erase_one_of_two_customers(lambda order_id: OrderSaga.objects.get(key=order_id).state)


def test_on_rabbitmq_no_queue_and_no_table_holds_an_erased_customer_and_a_replay_is_refused(
    processes, quiet_broker, settings
):
    """A real relay and consumers; the event log's consumer starts late, so its queue holds every
    message of both sagas meanwhile."""
    settings.SAGA_STYLE = "orchestration"
    processes.start("relay", "run_outbox_relay")
    processes.start("others", "run_consumers", "--except", "events")
    seed_catalog()
    gone, kept = (checkout(Client(), [{"sku": "WIDGET", "quantity": 2}], customer=c)["id"] for c in (ERASED, KEPT))
    wait_until(
        lambda: (
            sorted(OrderSaga.objects.filter(key__in=[gone, kept]).values_list("state", flat=True))
            == ["completed", "completed"]
        ),
        timeout=120,
        message="both sagas completed",
    )
    queued = queued_on_the_broker()
    created = [body for _, key, body in queued if key == "orders.order.created"]
    assert (len(created), len(queued) > len(created)) == (2, True)
    assert [json.loads(body)["customer_id"]["$encrypted"]["sub"][:8] for body in created] == ["subject-"] * 2
    assert [key for _, key, body in queued if ERASED in body or KEPT in body] == []

    call_command("erase_customer", ERASED, stdout=StringIO())
    assert tables_holding(ERASED) == []

    # the erased customer's order sent again: payments and the orchestrator refuse it as erased
    with transaction.atomic():
        assert publish_again(event_type="orders.order.created", correlation_id=gone) is True
    wait_until(lambda: DeadLetter.objects.count() == 2, timeout=60, message="the replay refused")
    assert sorted(DeadLetter.objects.values_list("consumer", "reason")) == [
        ("orchestrator", "subject_erased"),
        ("payments", "subject_erased"),
    ]

    processes.start("events", "run_consumers", "events")
    wait_until(lambda: queued_on_the_broker() == [], timeout=90, message="the event log's queue drained")
    assert tables_holding(ERASED) == []
    assert tables_holding(KEPT) == ["orders_checkout_request", "orders_order"]
    assert [Order.objects.get(pk=o).status for o in (gone, kept)] == ["CONFIRMED", "CONFIRMED"]
    assert ledger(kept) == [("charge", Decimal("39.98"))]
