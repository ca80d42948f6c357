"""The orchestrator owns one saga per orchestrated order (the seed's ``order_sagas``) and the
history of its transitions. Every transition checks and bumps ``version`` (optimistic
concurrency): two handlers of one order never both move it."""

import uuid

from django.db import models


class OrderSaga(models.Model):
    class Status(models.TextChoices):
        STARTED = "started", "started"
        RESERVING_INVENTORY = "reserving_inventory", "reserving_inventory"
        PROCESSING_PAYMENT = "processing_payment", "processing_payment"
        SHIPPING_ORDER = "shipping_order", "shipping_order"
        COMPLETED = "completed", "completed"
        COMPENSATING_PAYMENT = "compensating_payment", "compensating_payment"
        COMPENSATING_INVENTORY = "compensating_inventory", "compensating_inventory"
        FAILED = "failed", "failed"
        # orders ended the order itself (a cancellation, its saga deadline): the participants
        # compensate on orders' event, as in the choreography
        ENDED_BY_ORDERS = "ended_by_orders", "ended_by_orders"

    saga_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    order_id = models.UUIDField(unique=True)
    status = models.CharField(max_length=30, choices=Status.choices, default=Status.STARTED)
    # One idempotency key per step, made when the saga starts and sent again with a retried command.
    step_keys = models.JSONField(default=dict)
    # The order as its commands need it (from orders.order.created); the token only until charged.
    items = models.JSONField(default=list, help_text="[{sku, quantity, unit_price}]")
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3)
    payment_token = models.CharField(max_length=255, blank=True)
    ship_to = models.CharField(max_length=2, blank=True)
    failure_reason = models.CharField(max_length=30, blank=True)
    # The step waiting for a reply: how many times its command was sent, and its deadline's
    # scheduled message (cancelled when the reply comes).
    attempt = models.PositiveSmallIntegerField(default=0)
    deadline_id = models.UUIDField(null=True, blank=True)
    step_since = models.DateTimeField(
        auto_now_add=True, help_text="When it entered its status (not bumped by a retry)."
    )
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "order_sagas"
        indexes = [models.Index(fields=["status", "updated_at"], name="order_saga_status_idx")]

    def __str__(self) -> str:
        return f"saga of {self.order_id}: {self.status}"


class SagaTransition(models.Model):
    """One move of a saga: from, to, the message that caused it and the version it produced."""

    saga = models.ForeignKey(OrderSaga, related_name="transitions", on_delete=models.CASCADE)
    from_status = models.CharField(max_length=30)
    to_status = models.CharField(max_length=30)
    cause = models.CharField(max_length=255, help_text="The event or deadline that moved it.")
    version = models.PositiveIntegerField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "orchestrator_saga_transition"
        ordering = ["saga", "version"]
        constraints = [models.UniqueConstraint(fields=["saga", "version"], name="saga_transition_version_uniq")]

    def __str__(self) -> str:
        return f"{self.from_status} -> {self.to_status}"
