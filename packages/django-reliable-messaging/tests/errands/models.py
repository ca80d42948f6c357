from django.db import models


class Chore(models.Model):
    """One command an errand's participant carried out (what a repeated command must not add to)."""

    command = models.CharField(max_length=100)
    errand_id = models.CharField(max_length=100)
    item = models.CharField(max_length=100, blank=True)

    def __str__(self) -> str:
        return f"{self.command} {self.errand_id}"


class Missing(models.Model):
    """An item the participant cannot find (or deliver: ``undeliverable``)."""

    item = models.CharField(max_length=100, unique=True)
    undeliverable = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.item
