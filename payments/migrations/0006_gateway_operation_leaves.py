"""The fake gateway's ledger leaves payments (fake_gateway/, a development service of its own): its
model leaves payments' state only. Its table, ``fake_gateway_operation``, and its rows stay where they
are in a database migrated before: fake_gateway's 0001 adopts them where the fake gateway is installed
(development, tests), and nothing of payments reads them any more. (0001 no longer creates the table:
a database migrated from now on gets it from fake_gateway alone.)"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("payments", "0005_payment_call_error"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="GatewayOperation")],
            database_operations=[],
        ),
    ]
