"""Shipping's writes: one shipment per confirmed order, cancelled or returned with the order,
dispatched once by an operator.

Every write locks the order's shipment row (creating it if the order has none), so a
confirmation, a cancellation and a dispatch of one order take turns; a message arriving twice
or late finds the shipment past the state it expects and changes nothing.
"""

import logging
import uuid
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone
from reliable_messaging.api import Turn, publish, publish_again

from shipping.models import Shipment

logger = logging.getLogger(__name__)

# Where no carrier of ours goes: the orchestrated saga's shipping step refuses these addresses.
UNSERVED_COUNTRIES = frozenset({"AQ"})  # Antarctica


def _publish(shipment: Shipment, event_type: str) -> None:
    publish(
        event_type=event_type,
        aggregate_type="shipment",
        aggregate_id=str(shipment.id),
        correlation_id=str(shipment.order_id),  # the order's timeline shows it
        payload={"order_id": str(shipment.order_id), "shipment_id": str(shipment.id), "status": shipment.status},
    )


def _lock_or_create(order_id: uuid.UUID, status: str, ship_to: str = "") -> tuple[Shipment, bool]:
    """The order's shipment, locked; created in ``status`` (and then True) if it had none."""
    shipment, created = Shipment.objects.get_or_create(
        order_id=order_id, defaults={"status": status, "ship_to": ship_to}
    )
    if not created:
        shipment = Shipment.objects.select_for_update().get(pk=shipment.pk)
    return shipment, created


@transaction.atomic(savepoint=False)
def shipment_prepare(order_ids: list[uuid.UUID], *, turn: Turn) -> None:
    """A parcel to prepare for each confirmed order that has no shipment yet (a confirmation
    arriving twice or late changes nothing), in turn (``turn(n)``: where the n-th one's work is
    done), as if one after another: the shipments that exist locked, the missing ones created,
    each with one statement for the lot. A shipment another transaction creates meanwhile fails
    the insert, and the caller decides each order again on its own."""
    known = {
        s.order_id for s in Shipment.objects.select_for_update().filter(order_id__in=order_ids).order_by("order_id")
    }
    created: dict[uuid.UUID, Shipment] = {}
    for n, order_id in enumerate(order_ids):
        with turn(n):
            if order_id in known:
                logger.info("confirmation ignored: the order already has a shipment")
                continue
            known.add(order_id)
            created[order_id] = shipment = Shipment(order_id=order_id, status=Shipment.Status.PREPARING)
            _publish(shipment, "shipping.shipment.created")
    Shipment.objects.bulk_create(created.values())


@transaction.atomic(savepoint=False)
def shipment_prepare_ordered(requests: list[tuple[uuid.UUID, str]], *, turn: Turn) -> None:
    """The orchestrator's shipping step for each (order id, ship to), in turn (``turn(n)``: where
    the n-th one's work is done), as if one after another: prepare the parcel, or refuse an
    address no carrier of ours serves; an order that has its shipment already repeats what it
    announced, as it was. The shipments that exist locked, the missing ones created, each with
    one statement for the lot (a shipment created meanwhile fails the insert, as in
    ``shipment_prepare``)."""
    order_ids = sorted({order_id for order_id, _ in requests})
    shipments = {
        s.order_id: s for s in Shipment.objects.select_for_update().filter(order_id__in=order_ids).order_by("order_id")
    }
    created: list[Shipment] = []
    for n, (order_id, ship_to) in enumerate(requests):
        with turn(n):
            shipment = shipments.get(order_id)
            if shipment is None:
                refused = ship_to in UNSERVED_COUNTRIES
                status = Shipment.Status.REFUSED if refused else Shipment.Status.PREPARING
                shipments[order_id] = shipment = Shipment(order_id=order_id, status=status, ship_to=ship_to)
                created.append(shipment)
                _publish(shipment, "shipping.shipment.refused" if refused else "shipping.shipment.created")
            elif shipment.status == Shipment.Status.REFUSED:
                publish_again(event_type="shipping.shipment.refused", correlation_id=str(order_id))
            elif shipment.status in (Shipment.Status.PREPARING, Shipment.Status.DISPATCHED):
                publish_again(event_type="shipping.shipment.created", correlation_id=str(order_id))
            else:
                logger.info("shipping command ignored: the order's shipment is already %s", shipment.status)
    Shipment.objects.bulk_create(created)


@transaction.atomic(savepoint=False)
def shipment_cancel(*, order_id: uuid.UUID) -> None:
    """The order was cancelled after its confirmation: stop the parcel, or ask for it back."""
    shipment, created = _lock_or_create(order_id, Shipment.Status.CANCELLED)
    if created:  # the cancellation overtook the confirmation: a tombstone
        _publish(shipment, "shipping.shipment.cancelled")
    elif shipment.status == Shipment.Status.PREPARING:
        shipment.status = Shipment.Status.CANCELLED
        shipment.save(update_fields=["status", "updated_at"])
        _publish(shipment, "shipping.shipment.cancelled")
    elif shipment.status == Shipment.Status.DISPATCHED:
        shipment.status = Shipment.Status.RETURN_REQUESTED
        shipment.save(update_fields=["status", "updated_at"])
        _publish(shipment, "shipping.shipment.return_requested")
    else:
        logger.info("cancellation ignored: the order's shipment is already %s", shipment.status)


@transaction.atomic(savepoint=False)
def shipment_reinstate(*, order_id: uuid.UUID) -> None:
    """The return saga's compensation of ``shipment_cancel``: the pickup called off (the parcel
    stays with the customer, DISPATCHED) or the stopped parcel prepared again. Answered whatever
    the shipment's state, so the compensation ends; a shipment never made is left unmade."""
    shipment = Shipment.objects.select_for_update().filter(order_id=order_id).first()
    if shipment is None:
        logger.info("reinstatement ignored: the order has no shipment")
        return
    if shipment.status == Shipment.Status.RETURN_REQUESTED:
        shipment.status = Shipment.Status.DISPATCHED
    elif shipment.status == Shipment.Status.CANCELLED:
        shipment.status = Shipment.Status.PREPARING
    shipment.save(update_fields=["status", "updated_at"])
    _publish(shipment, "shipping.shipment.reinstated")


@dataclass
class DispatchResult:
    dispatched: list[Shipment] = field(default_factory=list)
    refused: list[Shipment] = field(default_factory=list)  # not PREPARING: cancelled, or dispatched already


def shipments_dispatch(*, shipment_ids: list[uuid.UUID]) -> DispatchResult:
    """Dispatch each PREPARING shipment (one transaction each); refuse the others."""
    result = DispatchResult()
    for shipment_id in shipment_ids:
        with transaction.atomic():
            shipment = Shipment.objects.select_for_update().filter(pk=shipment_id).first()
            if shipment is None:
                continue
            if shipment.status != Shipment.Status.PREPARING:
                result.refused.append(shipment)
                continue
            shipment.status, shipment.dispatched_at = Shipment.Status.DISPATCHED, timezone.now()
            shipment.save(update_fields=["status", "dispatched_at", "updated_at"])
            _publish(shipment, "shipping.shipment.dispatched")
            result.dispatched.append(shipment)
    return result
