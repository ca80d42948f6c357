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
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone
from hypothesis import strategies as st
from reliable_messaging.hosting import exchange_name, subscribers_of
from reliable_messaging.models import DeadLetter, OutboxMessage
from reliable_messaging.testing import (
    ATTEMPT_HEADER,
    Envelope,
    Outcome,
    advance_time,
    dead_letter_record,
    decide,
    envelope_for_outbox,
)

from faultlib.invariants import Report, check_invariants
from faultlib.steps import offered

MAX_ATTEMPTS = 4
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

    def fire_deadlines(self, within: timedelta) -> int:
        """Time runs forward by ``within``: the scheduled messages due by then (a saga's deadlines)
        move into the outbox and on to their consumers; how many."""
        moved = len(advance_time(within))
        self.relay()
        return moved

    def deliver_only(self, consumer: str, event_type: str) -> None:
        """The first pending ``event_type`` for ``consumer``, handled: the others wait."""
        index = next(
            i for i, d in enumerate(self.pending) if (d.consumer, d.envelope.routing_key) == (consumer, event_type)
        )
        assert self.deliver(index) is Outcome.HANDLED


TOKENS = ["tok_visa", "tok_visa", "tok_chargeDeclined", "tok_timeout", "tok_unavailable"]


def shuffled_sagas(data: st.DataObject) -> Report:
    """One to three orders on a fresh SKU of scarce stock, every delivery order chosen by ``data``."""
    # The contexts' own steps (faultlib.steps): each from its <package>/tests/steps.py.
    order_placed, order_cancelled, orders_expired = (
        offered(name) for name in ("order_placed", "order_cancelled", "orders_expired")
    )
    calls_in_flight, gateway_worker_step = offered("gateway_calls_in_flight"), offered("gateway_worker_step")
    # The messages that can overtake their cause (only here: a queue keeps their order) are retried
    # until it arrives, and after their last attempt dead-lettered saying so: a stock outcome waits
    # for the order's payment at orders, the charge command for the order's token at payments.
    waits_for_cause = offered("WAITS_FOR_PAYMENT") | offered("WAITS_FOR_TOKEN")
    waited_for_cause = (offered("WAITED_FOR_PAYMENT"), offered("WAITED_FOR_TOKEN"))

    sku = f"PROP-{uuid.uuid4().hex[:10]}"
    stock = data.draw(st.integers(0, 3), label="stock")
    offered("product_stocked")(sku=sku, name="Property", price=Decimal("5.00"), stock=stock)
    bus = Bus({sku})
    bus.relay()
    while bus.pending:  # the storefront learns of the product first: checkout needs it
        bus.deliver(0)
    order_ids = [
        order_placed(
            customer_id="prop",
            sku=sku,
            quantity=data.draw(st.integers(1, 2), label="quantity"),
            payment_token=data.draw(st.sampled_from(TOKENS), label="token"),
        )
        for _ in range(data.draw(st.integers(1, 3), label="orders"))
    ]
    cancel_at = data.draw(st.none() | st.integers(0, 40), label="cancel at step")
    cancelled = data.draw(st.sampled_from(order_ids), label="cancelled order")
    expire_at = data.draw(st.none() | st.integers(0, 40), label="deadline at step")
    accepted = []
    bus.scope.update(str(o) for o in order_ids)
    bus.relay()

    duplicates = 0
    for step in range(MAX_STEPS):
        if step == cancel_at and order_cancelled(cancelled):
            accepted.append(cancelled)
        if step == expire_at:
            orders_expired()
        bus.relay()
        calls = calls_in_flight(order_ids)
        if not bus.pending and not calls:
            if not offered("orders_pending")(order_ids):
                break
            orders_expired()  # a saga stuck on a dead letter: the deadline always comes
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

    report = check_invariants(initial_stock={sku: stock}, order_ids=order_ids, cancelled=accepted, broker=False)
    assert report.violations == [], str(report)
    unexpected = [
        (d.consumer, d.envelope.headers["event_type"], outcome)
        for d, outcome in bus.outcomes
        if (d.consumer, d.envelope.headers["event_type"]) not in waits_for_cause
        and outcome in (Outcome.DEAD_LETTER, Outcome.RETRY)
    ]
    # only a message that overtook its cause is retried: a charge whose answer was lost or that
    # the gateway refused is the gateway worker's to try again, never a redelivery
    assert unexpected == []
    waiting = {consumer for consumer, _ in waits_for_cause}
    waited = DeadLetter.objects.filter(consumer__in=waiting, correlation_id__in=[str(o) for o in order_ids])
    assert [d.error for d in waited if not any(why in d.error for why in waited_for_cause)] == []
    return report
