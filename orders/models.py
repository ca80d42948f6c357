"""Orders owns the orders, its storefront copy of the catalogue and the checkout keys."""

import uuid

from django.db import models
from django.utils import timezone
from reliable_messaging.sagas import SagaInstance


class StorefrontProduct(models.Model):
    """Orders' own copy of a product, kept from ``inventory.product.updated`` events."""

    sku = models.CharField(max_length=64, primary_key=True)
    name = models.CharField(max_length=200)
    price = models.DecimalField(max_digits=12, decimal_places=2)
    available = models.IntegerField()
    version = models.PositiveBigIntegerField(help_text="Inventory's version; only a newer one is applied.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "orders_storefront_product"
        ordering = ["sku"]

    def __str__(self) -> str:
        return self.sku


class Order(models.Model):
    class Status(models.TextChoices):
        # Labelled as the API spells them, so the admin and the API say the same words.
        PENDING = "PENDING", "PENDING"
        CONFIRMED = "CONFIRMED", "CONFIRMED"
        FAILED = "FAILED", "FAILED"
        CANCELLED = "CANCELLED", "CANCELLED"
        # A confirmed order's return (orders/services/returns.py): in flight, then done.
        RETURNING = "RETURNING", "RETURNING"
        RETURNED = "RETURNED", "RETURNED"

    class FailureReason(models.TextChoices):
        PAYMENT_DECLINED = "payment_declined", "payment_declined"
        OUT_OF_STOCK = "out_of_stock", "out_of_stock"
        TIMEOUT = "timeout", "timeout"
        SHIPPING_REFUSED = "shipping_refused", "shipping_refused"  # only the orchestrated saga asks shipping

    class SagaStyle(models.TextChoices):
        CHOREOGRAPHY = "choreography", "choreography"
        ORCHESTRATION = "orchestration", "orchestration"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    customer_id = models.CharField(max_length=255)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    failure_reason = models.CharField(max_length=30, choices=FailureReason.choices, null=True, blank=True)
    total = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3)
    paid_at = models.DateTimeField(
        null=True, blank=True, help_text="When payments' success for this order arrived; stock outcomes wait for it."
    )
    saga_style = models.CharField(
        max_length=13,
        choices=SagaStyle.choices,
        default=SagaStyle.CHOREOGRAPHY,
        help_text="SAGA_STYLE when it was placed: the order finishes in the style it began in.",
    )
    ship_to = models.CharField(max_length=2, blank=True, default="", help_text="ISO 3166 country, if given.")
    # A default, not auto_now_add: checkout stamps the order with its event's time (the ORM keeps it).
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "orders_order"
        indexes = [
            models.Index(fields=["status", "created_at"], name="order_status_created_idx"),
            models.Index(fields=["customer_id"], name="order_customer_idx"),
            models.Index(fields=["-created_at"], name="order_created_idx"),  # the admin's list, newest first
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


class OrderLine(models.Model):
    """A line keeps the SKU and the price at checkout, not a reference into inventory."""

    order = models.ForeignKey(Order, related_name="lines", on_delete=models.CASCADE)
    sku = models.CharField(max_length=64)
    quantity = models.PositiveIntegerField()
    unit_price = models.DecimalField(max_digits=12, decimal_places=2)

    class Meta:
        db_table = "orders_order_line"
        constraints = [models.UniqueConstraint(fields=["order", "sku"], name="order_line_sku_uniq")]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.quantity} x {self.sku}"


class CheckoutRequest(models.Model):
    """An ``Idempotency-Key`` and the answer it got, so a retried checkout gets the same answer.

    Written in the order's own transaction (``services.checkout``): a key exists only for a
    committed order, never half-done.
    """

    key = models.CharField(max_length=255, primary_key=True)
    request_hash = models.CharField(max_length=64, help_text="SHA-256 of the canonical JSON body.")
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    order_id = models.UUIDField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "orders_checkout_request"
        indexes = [models.Index(fields=["created_at"], name="checkout_created_idx")]

    def __str__(self) -> str:
        return self.key


class ReturnSagas(models.Manager):
    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().filter(name="return")


class ReturnSaga(SagaInstance):
    """A return's saga (orders/services/returns.py), kept in the bus's saga tables (``messaging_saga``,
    keyed by the order's id): its view for the admin."""

    objects = ReturnSagas()

    class Meta:
        proxy = True
        verbose_name = "return saga"

    def __str__(self) -> str:
        return f"return of {self.key}: {self.state}"
