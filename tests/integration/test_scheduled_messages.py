"""The shop's /metrics counts scheduled messages apart from the outbox's pending rows (the bus's
own behaviour of scheduled messages: packages/django-reliable-messaging/tests/test_scheduled.py)."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone
from reliable_messaging.api import publish
from reliable_messaging.models import ScheduledMessage
from reliable_messaging.testing import example_payload

from faultlib.fixtures import ALL_DATABASES

pytestmark = pytest.mark.django_db(databases=ALL_DATABASES)

EVENT = "orders.order.created"  # any declared event: publish refuses others


def test_metrics_count_scheduled_messages_and_not_as_pending():
    with transaction.atomic():
        for n in (1, 2):
            publish(
                event_type=EVENT,
                payload=example_payload(EVENT),
                aggregate_type="thing",
                aggregate_id=f"a{n}",
                deliver_at=timezone.now() + timedelta(minutes=5),
            )
    ScheduledMessage.objects.filter(aggregate_id="a2").update(deliver_at=timezone.now() - timedelta(seconds=90))

    text = Client().get("/metrics").content.decode()

    assert "messaging_scheduled_messages 2.0" in text
    assert "messaging_outbox_pending 0.0" in text  # scheduled is not pending: no relay alert for it
