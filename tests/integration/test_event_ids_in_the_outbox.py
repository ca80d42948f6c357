"""publish gives each outbox row a time-ordered event id."""

import time

import pytest
from django.db import transaction
from reliable_messaging.api import publish
from reliable_messaging.models import OutboxMessage
from reliable_messaging.testing import example_payload

from tests.conftest import ALL_DATABASES


@pytest.mark.django_db(databases=ALL_DATABASES)
def test_publish_gives_each_outbox_row_a_time_ordered_id():
    payload = example_payload("orders.order.created")
    with transaction.atomic():
        first = publish(event_type="orders.order.created", payload=payload, aggregate_type="order", aggregate_id="1")
        time.sleep(0.002)  # time is the subject: the second row is of a later millisecond
        second = publish(event_type="orders.order.created", payload=payload, aggregate_type="order", aggregate_id="2")

    rows = list(OutboxMessage.objects.order_by("event_id").values_list("event_id", flat=True))
    assert rows == [first, second]
    assert {first.version, second.version} == {7}
