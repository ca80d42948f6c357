"""Orders' choreographed saga as a table (orders.services.saga.SAGA): every stage meets every event
it reads, and each move leaves the order in the stage it names, with the event it publishes."""

import uuid
from contextlib import nullcontext
from decimal import Decimal

import pytest
from django.utils import timezone
from reliable_messaging.models import OutboxMessage

from orders.models import Order, OrderLine
from orders.services.saga import (
    PAYMENT_FAILED,
    PAYMENT_SUCCEEDED,
    RESERVATION_FAILED,
    SAGA,
    STOCK_RESERVED,
    Move,
    SagaEvent,
    Stage,
    order_saga_apply,
    stage_of,
)

EVENTS = (PAYMENT_SUCCEEDED, PAYMENT_FAILED, STOCK_RESERVED, RESERVATION_FAILED)
MOVES = [(stage, event, rule.to) for (stage, event), rule in SAGA.items() if isinstance(rule, Move)]
# What each move publishes (noting a payment: nothing).
PUBLISHED = {
    (Stage.PENDING, PAYMENT_SUCCEEDED): [],
    (Stage.ENDED, PAYMENT_SUCCEEDED): [],
    (Stage.PENDING, PAYMENT_FAILED): ["orders.order.failed"],
    (Stage.PAID, STOCK_RESERVED): ["orders.order.confirmed"],
    (Stage.PAID, RESERVATION_FAILED): ["orders.order.failed"],
}


def test_every_stage_meets_every_event_it_reads():
    assert set(SAGA) == {(stage, event) for stage in Stage for event in EVENTS}
    assert {(stage, event) for stage, event, _ in MOVES} == set(PUBLISHED)


def order_in(stage: Stage) -> Order:
    ended = stage in (Stage.ENDED, Stage.ENDED_PAID)
    order = Order.objects.create(
        customer_id="c",
        total=Decimal("20.00"),
        currency="USD",
        status=Order.Status.CANCELLED if ended else Order.Status.PENDING,
        paid_at=timezone.now() if stage in (Stage.PAID, Stage.ENDED_PAID) else None,
    )
    OrderLine.objects.create(order=order, sku="WIDGET", quantity=2, unit_price=Decimal("10.00"))
    assert stage_of(order) is stage
    return order


@pytest.mark.django_db
@pytest.mark.parametrize(("stage", "event", "to"), MOVES, ids=[f"{s.name}-{e}" for s, e, _ in MOVES])
def test_each_move_leaves_the_order_in_the_stage_it_names(stage, event, to):
    order = order_in(stage)
    saga_event = SagaEvent(order.pk, event, charged=(Decimal("20.00"), "USD"), reserved={"WIDGET": 2})

    order_saga_apply([saga_event], turn=lambda n: nullcontext())

    assert stage_of(Order.objects.get(pk=order.pk)) is to
    assert list(OutboxMessage.objects.values_list("event_type", flat=True)) == PUBLISHED[stage, event]


@pytest.mark.django_db
def test_an_event_about_an_order_never_had_changes_nothing():
    order_saga_apply([SagaEvent(uuid.uuid4(), PAYMENT_FAILED)], turn=lambda n: nullcontext())

    assert (Order.objects.count(), OutboxMessage.objects.count()) == (0, 0)
