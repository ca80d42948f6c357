"""The fake gateway's ledger: every charge and refund it made, keyed by the caller's idempotency key."""

from django.db import models


class GatewayOperation(models.Model):
    """It lives on the ``gateway`` database alias (fake_gateway/conf.py), outside any caller's
    transaction, like a real card processor's records. The table keeps the name it had when payments
    held it (payments' migration 0006 left it in place for this app's 0001)."""

    class Kind(models.TextChoices):
        CHARGE = "charge"
        REFUND = "refund"

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded"
        DECLINED = "declined"

    idempotency_key = models.CharField(max_length=255, unique=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    order_id = models.CharField(max_length=100, db_index=True)
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3)
    decline_code = models.CharField(max_length=100, blank=True)
    refunded_charge_key = models.CharField(max_length=255, blank=True, null=True, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "fake_gateway_operation"
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.outcome} {self.amount} ({self.idempotency_key})"
