"""Checkout: one order per ``Idempotency-Key``, written with its event in one transaction.

The key is claimed in a short transaction of its own (so a concurrent request with the same
key sees it in flight and gets a 409), then the order, its ``orders.order.created`` outbox
row and the stored response are committed together. A key whose process died mid-request
can be taken over once its lease has passed; the claim token makes sure that only one of
two such requests can complete. A rejected request releases the key.
"""

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from kernel.sql import insert_row
from messaging.api import publish, timeline_entry_of_new_event
from orders.models import CheckoutRequest, Order, OrderLine, StorefrontProduct


class CheckoutRejected(Exception):
    """The request is well-formed but cannot be accepted; ``errors`` maps fields to messages."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(errors)
        self.errors = errors


class IdempotencyKeyReused(Exception):
    """The key was used for a different request body."""


class IdempotencyKeyInUse(Exception):
    """A request with this key is still being processed."""


class CheckoutKeyLost(Exception):
    """Our in-flight claim was taken over (we were slower than the lease): nothing is kept."""


@dataclass(frozen=True)
class CheckoutResult:
    status: int
    body: dict
    replayed: bool


@dataclass(frozen=True)
class Line:
    sku: str
    quantity: int


@dataclass(frozen=True)
class PlacedOrder:
    """A new order with what its representation needs, known without reading it back."""

    order: Order
    lines: list[OrderLine]
    timeline: list[dict]


def request_fingerprint(data) -> str:
    """SHA-256 of the body as canonical JSON, so key order and spacing do not matter."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def checkout(
    *,
    key: str,
    request_hash: str,
    customer_id: str,
    lines: list[Line],
    payment_token: str,
    render: Callable[[PlacedOrder], dict],
) -> CheckoutResult:
    claimed = checkout_key_claim(key=key, request_hash=request_hash)
    if isinstance(claimed, CheckoutRequest):
        return CheckoutResult(claimed.response_status, claimed.response_body, replayed=True)
    try:
        with transaction.atomic():
            placed = _order_create(customer_id=customer_id, lines=lines, payment_token=payment_token)
            body = render(placed)
            _checkout_key_complete(key=key, token=claimed, order=placed.order, status=201, body=body)
    except BaseException:
        checkout_key_release(key=key, token=claimed)
        raise
    return CheckoutResult(201, body, replayed=False)


def checkout_key_claim(*, key: str, request_hash: str) -> CheckoutRequest | uuid.UUID:
    """Claim the key and return the claim token, or return the completed request to replay."""
    now = timezone.now()
    token = uuid.uuid4()
    lease = now + timedelta(seconds=settings.IDEMPOTENCY_KEY_LEASE)
    # A new key, the common case: one statement, committed at once so that a concurrent
    # request with the same key sees it in flight.
    claim = {
        "key": key,
        "request_hash": request_hash,
        "state": CheckoutRequest.State.IN_FLIGHT,
        "locked_until": lease,
        "claim_token": token,
        "created_at": now,
    }
    if insert_row(CheckoutRequest, claim, ignore_conflict_on=("key",)):
        return token
    with transaction.atomic():
        existing = CheckoutRequest.objects.select_for_update().filter(key=key).first()
        if existing and existing.created_at < now - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL):
            existing.delete()  # expired: the key is free again
            existing = None
        if existing is None:
            try:
                with transaction.atomic():
                    CheckoutRequest.objects.create(
                        key=key, request_hash=request_hash, locked_until=lease, claim_token=token
                    )
                return token
            except IntegrityError:  # claimed by a concurrent request a moment ago
                existing = CheckoutRequest.objects.select_for_update().get(key=key)
        if existing.request_hash != request_hash:
            raise IdempotencyKeyReused(key)
        if existing.state == CheckoutRequest.State.COMPLETED:
            return existing
        if existing.locked_until > now:
            raise IdempotencyKeyInUse(key)
        # The process that claimed it died: take it over.
        existing.locked_until, existing.claim_token = lease, token
        existing.save(update_fields=["locked_until", "claim_token"])
        return token


def _checkout_key_complete(*, key: str, token: uuid.UUID, order: Order, status: int, body: dict) -> None:
    completed = CheckoutRequest.objects.filter(
        key=key, claim_token=token, state=CheckoutRequest.State.IN_FLIGHT
    ).update(state=CheckoutRequest.State.COMPLETED, response_status=status, response_body=body, order_id=order.id)
    if not completed:
        raise CheckoutKeyLost(key)


def checkout_key_release(*, key: str, token: uuid.UUID) -> None:
    """Free a key whose request was rejected or failed, so the client can use it again."""
    CheckoutRequest.objects.filter(key=key, claim_token=token, state=CheckoutRequest.State.IN_FLIGHT).delete()


def checkout_keys_purge() -> int:
    """Delete keys older than ``IDEMPOTENCY_KEY_TTL``; return how many."""
    cutoff = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)
    deleted, _ = CheckoutRequest.objects.filter(created_at__lt=cutoff).delete()
    return deleted


def order_place(*, customer_id: str, lines: list[Line], payment_token: str) -> Order:
    """Create a PENDING order from the storefront's prices and announce it, in one transaction."""
    return _order_create(customer_id=customer_id, lines=lines, payment_token=payment_token).order


@transaction.atomic(savepoint=False)
def _order_create(*, customer_id: str, lines: list[Line], payment_token: str) -> PlacedOrder:
    prices = dict(StorefrontProduct.objects.filter(sku__in=[line.sku for line in lines]).values_list("sku", "price"))
    unknown = [line.sku for line in lines if line.sku not in prices]
    if unknown:
        raise CheckoutRejected({"items": [f"unknown sku: {sku}" for sku in unknown]})
    priced = [(line, prices[line.sku]) for line in lines]
    total = sum((price * line.quantity for line, price in priced), Decimal("0.00"))
    order = Order.objects.create(customer_id=customer_id, total=total, currency=settings.CURRENCY)
    order_lines = OrderLine.objects.bulk_create(
        [OrderLine(order=order, sku=line.sku, quantity=line.quantity, unit_price=price) for line, price in priced]
    )
    items = [{"sku": line.sku, "quantity": line.quantity, "unit_price": f"{price:.2f}"} for line, price in priced]
    event_type = "orders.order.created"
    event_id = publish(
        event_type=event_type,
        aggregate_type="order",
        aggregate_id=str(order.id),
        occurred_at=order.created_at,
        payload={
            "order_id": str(order.id),
            "customer_id": customer_id,
            "total": f"{total:.2f}",
            "currency": order.currency,
            "items": items,
            "payment_token": payment_token,
        },
    )
    created = timeline_entry_of_new_event(event_type=event_type, message_id=str(event_id), occurred_at=order.created_at)
    return PlacedOrder(order=order, lines=order_lines, timeline=[created])
