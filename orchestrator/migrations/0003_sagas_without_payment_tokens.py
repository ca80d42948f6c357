"""Sagas started before orders.order.created v3 kept the clear payment token in their data until
charged: forget it (payments keeps it from the event now; a v1 charge command already sent carries
its own)."""

from django.db import migrations


def forget_tokens(apps, schema_editor):
    Instance = apps.get_model("messaging", "SagaInstance")
    holding = Instance.objects.using(schema_editor.connection.alias).filter(name="order", data__has_key="payment_token")
    for saga in holding.iterator(chunk_size=500):
        del saga.data["payment_token"]
        saga.save(update_fields=["data"])


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0002_sagas_on_the_bus"),
    ]

    operations = [
        migrations.RunPython(forget_tokens, migrations.RunPython.noop, elidable=False),
    ]
