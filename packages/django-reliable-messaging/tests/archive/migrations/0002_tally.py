import uuid

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("archive", "0001_initial")]

    operations = [
        migrations.CreateModel(
            name="Tally",
            fields=[
                ("note_id", models.UUIDField(default=uuid.uuid4, primary_key=True, serialize=False)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("new", "New"),
                            ("counting", "Counting"),
                            ("counted", "Counted"),
                            ("refused", "Refused"),
                            ("recounting", "Recounting"),
                        ],
                        default="new",
                        max_length=20,
                    ),
                ),
                ("amount", models.DecimalField(blank=True, decimal_places=2, max_digits=12, null=True)),
                ("currency", models.CharField(blank=True, max_length=3)),
                ("reference", models.CharField(blank=True, max_length=100)),
                ("recount_reference", models.CharField(blank=True, max_length=100)),
                ("refusal_code", models.CharField(blank=True, max_length=100)),
                ("secret", models.CharField(blank=True, max_length=255)),
                ("items", models.JSONField(default=list)),
                ("causes", models.JSONField(default=dict)),
                ("due_at", models.DateTimeField(blank=True, null=True)),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
        ),
    ]
