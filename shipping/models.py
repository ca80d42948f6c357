"""Shipping owns the shipments: one per confirmed order, kept by the order's id alone."""

import uuid

from django.db import models


class Shipment(models.Model):
    """Where one order's parcel stands; its row lock serialises the order's handlers and the
    operator's dispatch.

    A shipment created ``CANCELLED`` is a tombstone: the cancellation of a confirmed order
    arrived before its confirmation (a retried delivery), so the confirmation, when it comes,
    must not prepare a parcel.
    """

    class Status(models.TextChoices):
        PREPARING = "PREPARING"
        DISPATCHED = "DISPATCHED"
        CANCELLED = "CANCELLED"
        RETURN_REQUESTED = "RETURN_REQUESTED"
        REFUSED = "REFUSED"  # the orchestrated saga asked, and the address is not one shipping serves

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    order_id = models.UUIDField(unique=True)
    status = models.CharField(max_length=20, choices=Status.choices)
    ship_to = models.CharField(max_length=2, blank=True, default="", help_text="ISO 3166 country, if given.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "shipping_shipment"
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "created_at"], name="shipping_status_created")]

    def __str__(self) -> str:
        return f"shipment of {self.order_id}: {self.status}"
