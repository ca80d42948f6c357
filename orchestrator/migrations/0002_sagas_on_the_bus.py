"""The orchestrator's sagas move to the bus's saga engine (reliable_messaging.sagas): each
``order_sagas`` row becomes an instance of the definition "order" v1 with its history, step keys
and deadline kept, so that a saga in flight goes on where it was; then its tables go, and ``OrderSaga`` is a view of the bus's instances of "order"."""

from django.db import migrations

# The keys were by step; the engine's are by command (a shipment's cancel kept its create's key).
KEYS = {
    "inventory": ("orchestrator.stock.reserve",),
    "payment": ("orchestrator.payment.charge",),
    "shipping": ("orchestrator.shipment.create", "orchestrator.shipment.cancel"),
    "refund": ("orchestrator.payment.refund",),
    "release": ("orchestrator.stock.release",),
}


def to_the_bus(apps, schema_editor):
    alias = schema_editor.connection.alias
    OrderSaga = apps.get_model("orchestrator", "OrderSaga")
    Instance = apps.get_model("messaging", "SagaInstance")
    Transition = apps.get_model("messaging", "SagaTransition")
    for saga in OrderSaga.objects.using(alias).iterator(chunk_size=500):
        Instance.objects.using(alias).create(
            id=saga.saga_id,
            name="order",
            key=str(saga.order_id),
            definition_version=1,
            state=saga.status,
            version=saga.version,
            attempt=saga.attempt,
            deadline_id=saga.deadline_id,
            step_keys={command: key for step, key in saga.step_keys.items() for command in KEYS.get(step, ())},
            data={
                "items": saga.items,
                "amount": f"{saga.amount:.2f}",
                "currency": saga.currency,
                "payment_token": saga.payment_token,
                "ship_to": saga.ship_to,
            },
            failure_reason=saga.failure_reason,
            step_since=saga.step_since,
            created_at=saga.created_at,
            updated_at=saga.updated_at,
        )
        Transition.objects.using(alias).bulk_create(
            Transition(
                saga_id=saga.saga_id, from_state=t.from_status, to_state=t.to_status, cause=t.cause, version=t.version, at=t.at
            )
            for t in saga.transitions.all()
        )


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0001_order_sagas"),
        ("messaging", "0012_sagas"),
    ]

    operations = [
        migrations.RunPython(to_the_bus, migrations.RunPython.noop, elidable=False),
        migrations.DeleteModel(name="SagaTransition"),
        migrations.DeleteModel(name="OrderSaga"),
        migrations.CreateModel(
            name="OrderSaga",
            fields=[],
            options={"verbose_name": "order saga", "proxy": True, "indexes": [], "constraints": []},
            bases=("messaging.sagainstance",),
        ),
    ]
