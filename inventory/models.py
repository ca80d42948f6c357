"""Inventory owns the products and their stock, and a per-order record of its reservations."""

import uuid

from django.core.validators import MinValueValidator
from django.db import models


class Product(models.Model):
    sku = models.CharField(max_length=64, primary_key=True)
    name = models.CharField(max_length=200)
    # inventory.product.updated refuses negative money: the admin refuses it before it is published.
    price = models.DecimalField(max_digits=12, decimal_places=2, validators=[MinValueValidator(0)])
    stock = models.PositiveIntegerField(help_text="Units available to reserve.")
    version = models.PositiveBigIntegerField(default=1, help_text="Grows with every change; sent to the storefront.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "inventory_product"
        ordering = ["sku"]

    def __str__(self) -> str:
        return f"{self.sku} ({self.stock} in stock)"


class Reservation(models.Model):
    """Where one order's stock stands, in inventory's eyes; its row lock serialises the order.

    ``cancelled`` is a tombstone: the order was cancelled or failed before any reservation, so
    a payment event arriving later must not reserve.
    """

    class Status(models.TextChoices):
        NEW = "new"
        RESERVED = "reserved"
        FAILED = "failed"
        RELEASED = "released"
        CANCELLED = "cancelled"
        RETURNED = "returned"  # back in stock: the order was returned (orders' return saga)

    order_id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.NEW)
    lines = models.JSONField(default=list, help_text='[{"sku": ..., "quantity": ...}] as reserved')
    reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "inventory_reservation"

    def __str__(self) -> str:
        return f"{self.order_id}: {self.status}"
