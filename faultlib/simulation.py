"""Sagas delivered in any order, with duplicates, through the real dispatch layer, in-process.

``Bus`` stands in for the relay and RabbitMQ: it turns unpublished outbox rows into one
delivery per consumer bound to the event type, and hands a chosen delivery to
``reliable_messaging._dispatch.decide`` exactly as the consumer loop does (a retry comes back with the
next attempt number, a spent budget becomes a dead letter). ``shuffled_sagas`` lets
hypothesis choose every step: which delivery goes next, whether it is delivered again later
(its ack was lost), when payments' gateway worker makes the calls in flight (time runs forward
to their due time), and when a cancellation or the deadline strikes.
"""

import uuid
from dataclasses import dataclass, replace
from decimal import Decimal

from django.utils import timezone
from hypothesis import strategies as st
from reliable_messaging.hosting import exchange_name, subscribers_of
from reliable_messaging.models import DeadLetter, OutboxMessage
from reliable_messaging.testing import (
    ATTEMPT_HEADER,
    Envelope,
    Outcome,
    dead_letter_record,
    decide,
    envelope_for_outbox,
)

from faultlib.invariants import Report, check_invariants
from inventory.services import product_upsert
from orders.models import Order
from orders.services.checkout import Line, order_place
from orders.services.saga import InvalidOrderState, order_cancel, orders_expire
from payments.gateway_calls import run_due_calls
from payments.models import Payment

MAX_ATTEMPTS = 4
# Orders decides on a stock outcome only once the order's payment success has reached it: one
# delivered first is retried, and after its last attempt a dead letter (the deadline then fails
# and compensates the order). Only here can it overtake its cause: a queue keeps their order.
WAITS_FOR_PAYMENT = {("orders", "inventory.stock.reserved"), ("orders", "inventory.stock.reservation_failed")}
WAITED_FOR_PAYMENT = "before the order's payment succeeded here"
MAX_DUPLICATES = 6
MAX_STEPS = 400


@dataclass(frozen=True)
class Delivery:
    consumer: str
    envelope: Envelope
    attempt: int = 1


class Bus:
    """Carries the events of its ``scope`` (order ids and SKUs) only: examples stay independent."""

    def __init__(self, scope: set[str]) -> None:
        self.scope = scope
        self.pending: list[Delivery] = []
        self.outcomes: list[tuple[Delivery, Outcome]] = []

    def relay(self) -> None:
        rows = list(
            OutboxMessage.objects.filter(published_at__isnull=True, correlation_id__in=self.scope).order_by(
                "created_at", "id"
            )
        )
        for row in rows:
            envelope = envelope_for_outbox(row, exchange_name())
            self.pending += [Delivery(c, envelope) for c in subscribers_of(row.event_type)]
        OutboxMessage.objects.filter(pk__in=[r.pk for r in rows]).update(published_at=timezone.now())

    def deliver(self, index: int, *, again_later: bool = False) -> Outcome:
        delivery = self.pending[index] if again_later else self.pending.pop(index)
        envelope = delivery.envelope
        headers = {**envelope.headers, ATTEMPT_HEADER: delivery.attempt}
        decision = decide(
            delivery.consumer,
            body=envelope.body,
            properties=envelope.properties,
            headers=headers,
            routing_key=envelope.routing_key,
        )
        if decision.outcome is Outcome.RETRY and delivery.attempt < MAX_ATTEMPTS:
            self.pending.append(replace(delivery, attempt=delivery.attempt + 1))
        elif decision.outcome in (Outcome.RETRY, Outcome.DEAD_LETTER):
            dead_letter_record(
                consumer=delivery.consumer,
                body=envelope.body,
                properties=envelope.properties,
                headers=headers,
                routing_key=envelope.routing_key,
                reason=decision.reason,
                error=decision.error,
                attempts=delivery.attempt,
            )
        elif decision.outcome is Outcome.DATABASE_DOWN:
            raise AssertionError(f"the database went away: {decision.error}")
        self.outcomes.append((delivery, decision.outcome))
        self.relay()
        return decision.outcome


def calls_in_flight(order_ids: list) -> bool:
    return Payment.objects.filter(
        order_id__in=order_ids, status__in=[Payment.Status.CHARGING, Payment.Status.REFUNDING]
    ).exists()


def gateway_worker_step(order_ids: list) -> None:
    """Time runs forward to the calls' due time (a backoff, a lease); the worker makes them."""
    Payment.objects.filter(order_id__in=order_ids).update(call_due_at=timezone.now())
    run_due_calls(rounds=1)


TOKENS = ["tok_visa", "tok_visa", "tok_chargeDeclined", "tok_timeout", "tok_unavailable"]


def shuffled_sagas(data: st.DataObject) -> Report:
    """One to three orders on a fresh SKU of scarce stock, every delivery order chosen by ``data``."""
    sku = f"PROP-{uuid.uuid4().hex[:10]}"
    stock = data.draw(st.integers(0, 3), label="stock")
    product_upsert(sku=sku, name="Property", price=Decimal("5.00"), stock=stock)
    bus = Bus({sku})
    bus.relay()
    while bus.pending:  # the storefront learns of the product first: checkout needs it
        bus.deliver(0)
    orders = [
        order_place(
            customer_id="prop",
            lines=[Line(sku, data.draw(st.integers(1, 2), label="quantity"))],
            payment_token=data.draw(st.sampled_from(TOKENS), label="token"),
        )
        for _ in range(data.draw(st.integers(1, 3), label="orders"))
    ]
    cancel_at = data.draw(st.none() | st.integers(0, 40), label="cancel at step")
    cancelled = data.draw(st.sampled_from(orders), label="cancelled order")
    expire_at = data.draw(st.none() | st.integers(0, 40), label="deadline at step")
    order_ids = [o.id for o in orders]
    accepted = []
    bus.scope.update(str(o.id) for o in orders)
    bus.relay()

    duplicates = 0
    for step in range(MAX_STEPS):
        if step == cancel_at and _cancel(cancelled.id):
            accepted.append(cancelled.id)
        if step == expire_at:
            orders_expire(timeout_seconds=0)
        bus.relay()
        calls = calls_in_flight(order_ids)
        if not bus.pending and not calls:
            if not Order.objects.filter(pk__in=order_ids, status=Order.Status.PENDING).exists():
                break
            orders_expire(timeout_seconds=0)  # a saga stuck on a dead letter: the deadline always comes
            continue
        index = data.draw(st.integers(0, len(bus.pending) - 1 + calls), label="deliver, or the gateway worker")
        if index == len(bus.pending):
            gateway_worker_step(order_ids)
            continue
        again = duplicates < MAX_DUPLICATES and data.draw(st.booleans(), label="deliver again later")
        duplicates += again
        bus.deliver(index, again_later=again)
    else:
        raise AssertionError(f"still {len(bus.pending)} deliveries after {MAX_STEPS} steps")

    report = check_invariants(
        initial_stock={sku: stock}, order_ids=[o.id for o in orders], cancelled=accepted, broker=False
    )
    assert report.violations == [], str(report)
    unexpected = [
        (d.consumer, d.envelope.headers["event_type"], outcome)
        for d, outcome in bus.outcomes
        if (d.consumer, d.envelope.headers["event_type"]) not in WAITS_FOR_PAYMENT
        and outcome in (Outcome.DEAD_LETTER, Outcome.RETRY)
    ]
    # only a stock outcome that overtook its payment is retried: a charge whose answer was lost
    # or that the gateway refused is the gateway worker's to try again, never a redelivery
    assert unexpected == []
    waited = DeadLetter.objects.filter(consumer="orders", correlation_id__in=[str(o.id) for o in orders])
    assert [d.error for d in waited.exclude(error__contains=WAITED_FOR_PAYMENT)] == []
    return report


def _cancel(order_id) -> bool:
    try:
        order_cancel(order_id=order_id)
    except InvalidOrderState:
        return False
    return True
