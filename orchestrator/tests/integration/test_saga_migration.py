"""orchestrator's migration 0002 moves each saga of order_sagas, in flight or done, to the bus's saga
engine with its state, version, step keys, deadline and history: a saga in flight goes on; 0003
forgets the payment tokens their data kept (payments keeps them now)."""

import uuid
from decimal import Decimal

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from reliable_messaging.models import SagaInstance

from orchestrator.models import OrderSaga

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("orchestrator", "0001_order_sagas")]
AFTER = [("orchestrator", "0002_sagas_on_the_bus")]


def migrate(to):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(to)
    return executor.loader.project_state(to).apps


def test_a_saga_in_flight_moves_to_the_engine_with_its_keys_deadline_and_history():
    old = migrate(BEFORE)
    try:
        saga = old.get_model("orchestrator", "OrderSaga").objects.create(
            order_id=uuid.uuid4(),
            status="processing_payment",
            step_keys={
                "inventory": "k-inv",
                "payment": "k-pay",
                "shipping": "k-ship",
                "refund": "k-ref",
                "release": "k-rel",
            },
            items=[{"sku": "WIDGET", "quantity": 2, "unit_price": "10.00"}],
            amount=Decimal("20.00"),
            currency="USD",
            payment_token="tok_visa",
            attempt=2,
            deadline_id=uuid.uuid4(),
            version=3,
        )
        transitions = old.get_model("orchestrator", "SagaTransition").objects
        transitions.create(saga=saga, from_status="started", to_status="reserving_inventory", cause="a", version=2)
        transitions.create(
            saga=saga, from_status="reserving_inventory", to_status="processing_payment", cause="b", version=3
        )
    finally:
        migrate(AFTER)

    moved = OrderSaga.objects.get()
    assert (moved.pk, moved.key, moved.definition_version, moved.state) == (
        saga.pk,
        str(saga.order_id),
        1,
        "processing_payment",
    )
    assert (moved.version, moved.attempt, moved.deadline_id) == (3, 2, saga.deadline_id)
    assert moved.step_keys == {
        "orchestrator.stock.reserve": "k-inv",
        "orchestrator.payment.charge": "k-pay",
        "orchestrator.shipment.create": "k-ship",
        "orchestrator.shipment.cancel": "k-ship",
        "orchestrator.payment.refund": "k-ref",
        "orchestrator.stock.release": "k-rel",
    }
    assert moved.data == {
        "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": "10.00"}],
        "amount": "20.00",
        "currency": "USD",
        "payment_token": "tok_visa",
        "ship_to": "",
    }
    assert list(moved.transitions.values_list("from_state", "to_state", "cause", "version")) == [
        ("started", "reserving_inventory", "a", 2),
        ("reserving_inventory", "processing_payment", "b", 3),
    ]
    assert moved.step_since <= timezone.now()


def test_migration_0003_forgets_the_tokens_sagas_held_and_nothing_else():
    old = migrate(AFTER)
    try:
        instances = old.get_model("messaging", "SagaInstance").objects
        data = {
            "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": "10.00"}],
            "amount": "20.00",
            "currency": "USD",
        }
        holding = instances.create(name="order", key=str(uuid.uuid4()), definition_version=1,
                                   state="reserving_inventory", data={**data, "payment_token": "tok_visa"})  # fmt: skip
        other = instances.create(name="other", key=str(uuid.uuid4()), definition_version=1, state="started",
                                 data={"payment_token": "not an order saga's"})  # fmt: skip
    finally:
        migrate([("orchestrator", "0003_sagas_without_payment_tokens")])

    assert SagaInstance.objects.get(pk=holding.pk).data == data
    assert SagaInstance.objects.get(pk=other.pk).data == {"payment_token": "not an order saga's"}
