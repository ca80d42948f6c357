import django.utils.timezone
from django.db import migrations, models


def forget_claims_in_flight(apps, schema_editor):
    # A key is now written only with its committed order. A claim still in flight belonged to a
    # request of the previous version that never completed: the key is free again.
    checkout_requests = apps.get_model("orders", "CheckoutRequest").objects.using(schema_editor.connection.alias)
    checkout_requests.filter(state="in_flight").delete()


class Migration(migrations.Migration):

    dependencies = [
        ("orders", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(forget_claims_in_flight, migrations.RunPython.noop),
        migrations.RemoveField(model_name="checkoutrequest", name="state"),
        migrations.RemoveField(model_name="checkoutrequest", name="locked_until"),
        migrations.RemoveField(model_name="checkoutrequest", name="claim_token"),
        migrations.AlterField(
            model_name="checkoutrequest", name="response_status", field=models.PositiveSmallIntegerField()
        ),
        migrations.AlterField(model_name="checkoutrequest", name="response_body", field=models.JSONField()),
        migrations.AlterField(model_name="checkoutrequest", name="order_id", field=models.UUIDField()),
        migrations.AlterField(
            model_name="checkoutrequest",
            name="created_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
    ]
