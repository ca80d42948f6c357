import uuid

from django.db import models


class Filed(models.Model):
    note_id = models.UUIDField(unique=True)
    text = models.TextField()

    def __str__(self) -> str:
        return self.text


class Refusal(models.Model):
    """A text the archive refuses for now (a test's stand-in for a bug fixed later)."""

    text = models.TextField(unique=True)

    def __str__(self) -> str:
        return self.text


class Tally(models.Model):
    """A row of every kind of column the bus's one-statement inserts must store as the ORM does
    (``reliable_messaging._sql``): text, numbers, JSON, instants, an ``auto_now``."""

    class Status(models.TextChoices):
        NEW = "new"
        COUNTING = "counting"
        COUNTED = "counted"
        REFUSED = "refused"
        RECOUNTING = "recounting"

    note_id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.NEW)
    amount = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    reference = models.CharField(max_length=100, blank=True)
    recount_reference = models.CharField(max_length=100, blank=True)
    refusal_code = models.CharField(max_length=100, blank=True)
    secret = models.CharField(max_length=255, blank=True)
    items = models.JSONField(default=list)
    causes = models.JSONField(default=dict)
    due_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.note_id}: {self.status}"
