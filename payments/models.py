"""Payments keeps one record per order: what was charged and refunded, and its row lock."""

import uuid

from django.db import models

CALL_ERROR_LENGTH = 500


class Payment(models.Model):
    """Where one order's money stands, in payments' eyes.

    ``voided`` is a tombstone: the order was cancelled or failed before any charge, so an
    ``orders.order.created`` arriving later must not charge.

    A call is an operation in flight: ``charging`` / ``refunding``
    is committed before the call (with what the call needs), the gateway worker makes the call
    outside any transaction and records its outcome; ``call_due_at`` is when a worker may take it
    (its lease), ``call_attempts`` how many times one did (after the first, the gateway is asked by
    key before anything else). ``refund_reason`` set while ``charging``: refund once charged.
    """

    class Status(models.TextChoices):
        NEW = "new"
        CHARGING = "charging"
        CHARGED = "charged"
        DECLINED = "declined"
        REFUNDING = "refunding"
        REFUNDED = "refunded"
        VOIDED = "voided"

    order_id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.NEW)
    amount = models.DecimalField(max_digits=12, decimal_places=2, null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    charge_id = models.CharField(max_length=100, blank=True)
    refund_id = models.CharField(max_length=100, blank=True)
    decline_code = models.CharField(max_length=100, blank=True)
    # The call in flight (``token`` also while an orchestrated order waits for its charge
    # command: payments_payment is the only table that holds it clear). Database defaults: an older release's code,
    # which names none of these, still inserts rows during a rolling upgrade.
    token = models.CharField(max_length=255, blank=True, db_default="")
    items = models.JSONField(default=list, db_default=[])
    refund_reason = models.CharField(max_length=100, blank=True, db_default="")
    call_due_at = models.DateTimeField(null=True, blank=True, db_index=True)
    call_attempts = models.PositiveIntegerField(default=0, db_default=0)
    # Why the call in flight was last tried again (empty once it has an outcome): what an operator
    # reads when a call keeps failing (payments_gateway_calls_failing on /metrics).
    call_error = models.CharField(max_length=CALL_ERROR_LENGTH, blank=True, db_default="")
    # The message that asked for each call ({"charge": ..., "refund": ...}: its id and trace
    # context, reliable_messaging.api.current_cause): the outcome's event names it as its cause.
    causes = models.JSONField(default=dict, db_default={})
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "payments_payment"
        indexes = [
            # The calls in flight, oldest due first: what the worker claims and /metrics reads,
            # without walking every finished payment (their call_due_at stays set).
            models.Index(
                fields=["call_due_at", "created_at"],
                name="payments_calls_in_flight_idx",
                condition=models.Q(status__in=["charging", "refunding"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.order_id}: {self.status}"
