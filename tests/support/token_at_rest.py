"""Where a payment token lies after a checkout: every table of the test database that holds it
clear (each row read whole, as text), every message the stand-in broker carried that holds it,
and what the gateway was asked to charge with. tests/integration/test_payment_token_at_rest.py
(choreographed) and tests/orchestration/test_payment_token_at_rest.py (orchestrated)."""

from decimal import Decimal

import pytest
from django.db import connection
from reliable_messaging.models import EventLogEntry, OutboxMessage
from reliable_messaging.testing import topology_queues

from faultlib.simulation import Bus
from faultlib.steps import offered
from inventory.services import product_upsert
from orders.services.checkout import Line, order_place

# A token no other row or message could hold by chance; chargeable at the stand-in gateway.
TOKEN = "tok_visa"


def tables_holding(text: str) -> list[str]:
    """The tables of the default database (every app's, the bus's included) with a row holding ``text``."""
    holding = []
    with connection.cursor() as cursor:
        for table in sorted(connection.introspection.table_names(cursor)):
            cursor.execute(
                f"SELECT count(*) FROM {connection.ops.quote_name(table)} AS t WHERE t::text LIKE %s", [f"%{text}%"]
            )
            if cursor.fetchone()[0]:
                holding.append(table)
    return holding


def messages_holding(bus: Bus, text: str) -> list[str]:
    """The routing keys of the messages the stand-in broker carried, or still queues, holding ``text``."""
    carried = [delivery for delivery, _ in bus.outcomes] + bus.pending
    return [d.envelope.routing_key for d in carried if text.encode() in d.envelope.body]


@pytest.fixture
def charges(monkeypatch) -> list[tuple[str, str]]:
    """(order id, token) of each charge the stand-in gateway made."""
    from fake_gateway import in_process

    made = []
    record_charge = in_process.fake_ledger.record_charge

    def recorded(**call):
        op, made_now = record_charge(**call)
        if made_now:
            made.append((call["order_id"], call["token"]))
        return op, made_now

    monkeypatch.setattr(in_process.fake_ledger, "record_charge", recorded)
    return made


def stocked_bus() -> Bus:
    """WIDGET at 10.00, 5 in stock, known to the storefront."""
    product_upsert(sku="WIDGET", name="Widget", price=Decimal("10.00"), stock=5)
    bus = Bus({"WIDGET"})
    run_to_quiet(bus)
    return bus


def place(bus: Bus) -> str:
    """Two WIDGETs, paid with ``TOKEN``."""
    order = order_place(customer_id="c", lines=[Line("WIDGET", 2)], payment_token=TOKEN)
    bus.scope.add(str(order.id))
    bus.relay()
    return str(order.id)


def run_to_quiet(bus: Bus, *, gateway: bool = True) -> None:
    """Every delivery in the order it was published, and (``gateway``) the gateway worker when
    nothing else is left; without it, the saga stops where a charge waits for its call."""
    order_ids = [i for i in bus.scope if i != "WIDGET"]
    for _ in range(300):
        bus.relay()
        if bus.pending:
            bus.deliver(0)
        elif gateway and offered("gateway_calls_in_flight")(order_ids):
            offered("gateway_worker_step")(order_ids)
        else:
            return
    raise AssertionError("still busy")


def encrypted_token_of(order_id: str) -> dict:
    """orders.order.created's token as its outbox row holds it (written as v4)."""
    created = OutboxMessage.objects.get(correlation_id=order_id, event_type="orders.order.created")
    assert created.schema_version == 4
    return created.payload["payment_token"]


def logged_token_of(order_id: str) -> dict:
    """orders.order.created's token as the event log (a consumer not permitted) received it."""
    logged = EventLogEntry.objects.get(correlation_id=order_id, event_type="orders.order.created")
    return logged.payload["payment_token"]


def queued_on_the_broker() -> list[tuple[str, str, str]]:
    """(queue, routing key, body) of every message in the topology's queues (their delay queues
    included), read and handed back unacknowledged: the queues keep them."""
    from faultlib.broker import connection

    found = []
    with connection() as conn:
        channel = conn.channel()
        for queues in topology_queues(conn).values():
            for queue in queues:
                while (message := channel.basic_get(queue=queue.name, no_ack=False)) is not None:
                    body = message.body.decode() if isinstance(message.body, bytes) else message.body
                    found.append((queue.name, message.delivery_info["routing_key"], body))
        channel.close()  # unacknowledged: back in their queues
    return found
