"""The ledger's table, ``fake_gateway_operation``. Payments held the model until its migration 0006,
which left the table in place: a database migrated before this app existed keeps it and its rows
(only the model's state moves here), a new one gets it created."""

from django.db import migrations, models


class CreateModelUnlessItsTableExists(migrations.CreateModel):
    """CreateModel, but an existing table (created by payments' 0001) is adopted as it is."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        table = to_state.apps.get_model(app_label, self.name)._meta.db_table
        if table in schema_editor.connection.introspection.table_names():
            return
        super().database_forwards(app_label, schema_editor, from_state, to_state)


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        CreateModelUnlessItsTableExists(
            name="GatewayOperation",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("idempotency_key", models.CharField(max_length=255, unique=True)),
                ("kind", models.CharField(choices=[("charge", "Charge"), ("refund", "Refund")], max_length=10)),
                (
                    "outcome",
                    models.CharField(choices=[("succeeded", "Succeeded"), ("declined", "Declined")], max_length=10),
                ),
                ("order_id", models.CharField(db_index=True, max_length=100)),
                ("amount", models.DecimalField(decimal_places=2, max_digits=12)),
                ("currency", models.CharField(max_length=3)),
                ("decline_code", models.CharField(blank=True, max_length=100)),
                ("refunded_charge_key", models.CharField(blank=True, max_length=255, null=True, unique=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "db_table": "fake_gateway_operation",
                "ordering": ["id"],
            },
        ),
    ]
