"""The orchestrator keeps no table of its own: each orchestrated order's saga is an instance of
its definition (orchestrator/services.py) in the bus's saga tables (``messaging_saga``, its
history in ``messaging_saga_transition``), keyed by the order's id. ``OrderSaga`` is their view
for the admin and the operator's reads."""

from django.db import models
from reliable_messaging.sagas import SagaInstance


class OrderSagas(models.Manager):
    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().filter(name="order")


class OrderSaga(SagaInstance):
    objects = OrderSagas()

    class Meta:
        proxy = True
        verbose_name = "order saga"

    def __str__(self) -> str:
        return f"saga of {self.key}: {self.state}"
