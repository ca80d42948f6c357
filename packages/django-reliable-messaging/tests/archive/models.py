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
