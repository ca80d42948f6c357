"""Two customers' orders through their whole saga, then ``erase_customer`` for one of them: no
table of the test database (every row read whole, as text) and no message the stand-in broker
carried holds the erased customer's id; the other customer's order, its events and its saga are as
they were; a redelivery of the erased customer's old order is refused as erased.
tests/integration/test_customer_erasure.py (choreographed), tests/orchestration/test_customer_erasure.py
(orchestrated)."""

from collections.abc import Callable
from dataclasses import replace
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from reliable_messaging.models import DeadLetter, EventLogEntry, OutboxMessage
from reliable_messaging.testing import Outcome

from faultlib.saga import checkout
from faultlib.simulation import Bus
from orders.models import Order
from tests.support.token_at_rest import messages_holding, run_to_quiet, stocked_bus, tables_holding

# Ids no other row or message could hold by chance.
ERASED, KEPT = "customer-ada-7f3a91", "customer-bob-2c5e04"


def placed_for(bus: Bus, customer: str) -> str:
    """Two WIDGETs for ``customer``, shipped to France, through the API (its answer is kept for the key)."""
    order_id = checkout(Client(), [{"sku": "WIDGET", "quantity": 2}], customer=customer, ship_to="FR")["id"]
    bus.scope.add(order_id)
    bus.relay()
    return order_id


def as_it_is(order_id: str) -> tuple:
    """The order, and every event of its saga, as the outbox and the event log hold them."""
    rows = OutboxMessage.objects.filter(correlation_id=order_id).order_by("event_id")
    logged = EventLogEntry.objects.filter(correlation_id=order_id).order_by("message_id")
    return (
        Order.objects.filter(pk=order_id).values().get(),
        [(r.event_type, r.payload, r.published_at) for r in rows],
        [(e.event_type, e.payload) for e in logged],
    )


def erase_one_of_two_customers(saga_done: Callable[[str], object]) -> None:
    """The scenario, in the saga style the test set; ``saga_done(order_id)`` its finished saga's state."""
    bus = stocked_bus()
    gone, kept = placed_for(bus, ERASED), placed_for(bus, KEPT)
    run_to_quiet(bus)
    assert [Order.objects.get(pk=o).status for o in (gone, kept)] == ["CONFIRMED", "CONFIRMED"]
    # before: each customer's id is clear in orders' own tables only, sealed in every message
    for customer in (ERASED, KEPT):
        assert tables_holding(customer) == ["orders_checkout_request", "orders_order"]
        assert messages_holding(bus, customer) == []
    sealed = OutboxMessage.objects.get(correlation_id=gone, event_type="orders.order.created").payload["customer_id"]
    key_id = sealed["$encrypted"]["sub"]
    before = as_it_is(kept)

    out = StringIO()
    call_command("erase_customer", ERASED, stdout=out)

    assert out.getvalue() == "customer erased: 1 order(s) blanked, 1 key(s) deleted\n"
    assert tables_holding(ERASED) == []
    blanked = Order.objects.get(pk=gone)
    assert (blanked.customer_id, blanked.ship_to, blanked.status) == ("", "", "CONFIRMED")
    # the other customer: their order, its events and its saga untouched
    assert as_it_is(kept) == before
    assert tables_holding(KEPT) == ["orders_checkout_request", "orders_order"]
    assert saga_done(kept) == saga_done(gone)

    # a redelivery (or a replay) of the erased customer's old order is refused as erased, not crashed
    [old] = [
        d
        for d, _ in bus.outcomes
        if (d.consumer, d.envelope.routing_key, d.envelope.correlation_id) == ("payments", "orders.order.created", gone)
    ]
    bus.pending.append(replace(old, attempt=1))
    assert bus.deliver(len(bus.pending) - 1) == Outcome.DEAD_LETTER
    letter = DeadLetter.objects.get()
    assert (letter.consumer, letter.reason, letter.message_id) == (
        "payments",
        "subject_erased",
        old.envelope.message_id,
    )
    assert letter.error.startswith(f"field 'customer_id': subject erased (its key {key_id} was deleted on ")
    shown = StringIO()
    call_command("dead_letters", "show", str(letter.pk), stdout=shown)  # what an operator reads
    assert f'"customer_id": "erased (subject key {key_id})"' in shown.getvalue()
    assert tables_holding(ERASED) == []  # the dead letter holds only the ciphertext

    with pytest.raises(CommandError, match=f"^no order and no key of customer '{ERASED}': nothing to erase$"):
        call_command("erase_customer", ERASED)
