from django.db import models


class BenchRow(models.Model):
    """What the bare endpoint writes: one row per request."""

    customer_id = models.CharField(max_length=255)
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"bench row {self.pk}"
