"""Checkout: one order per ``Idempotency-Key``, written with its event and its answer in one commit.

The order, its lines, its ``orders.order.created`` outbox row and the key's row (with the
answer to replay) are one transaction. The order, its lines and its event go through a writer
(``OrderWriter``: ``write_order``, the plain ORM, is the reference; ``write_order_together``,
which writes the same rows in fewer statements, is the one checkout uses), then the key's row is
inserted last:

- A new key, the common case: one commit.
- A key already used: its insert finds the row; the order just written rolls back and the
  stored answer is replayed (same body) or refused (another body: 422).
- The same key while the first request is still in flight: the insert waits on the first
  transaction's uncommitted row (the primary key), at most ``IDEMPOTENCY_KEY_WAIT``
  (``lock_timeout``, SQLSTATE 55P03). If the first commits meanwhile, this one replays its
  answer; if it is still running, 409. On SQLite, writers take turns anyway.
- A process that dies mid-request takes its transaction with it, the key's row too: the key is
  free again at once, with no lease to wait for.
"""

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone
from reliable_messaging.api import collecting, publish, write_collected
from reliable_messaging.operator import TimelineEntry, timeline_entry_of_new_event

from kernel.bulk import insert_together
from kernel.exceptions import LOCK_NOT_AVAILABLE, sqlstate_of
from orders.conf import setting
from orders.models import CheckoutRequest, Order, OrderLine, StorefrontProduct
from orders.representations import order_representation


class CheckoutRejected(Exception):
    """The request is well-formed but cannot be accepted; ``errors`` maps fields to messages."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(errors)
        self.errors = errors


class IdempotencyKeyReused(Exception):
    """The key was used for a different request body."""


class IdempotencyKeyInUse(Exception):
    """A request with this key is still being processed."""


class _KeyTaken(Exception):
    """The key's row exists: roll the new order back, then answer from the row."""


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
    timeline: list[TimelineEntry]


def request_fingerprint(data) -> str:
    """SHA-256 of the body as canonical JSON, so key order and spacing do not matter."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


# The seam checkout writes through: the order, its lines and its events (the outbox rows
# ``collecting()`` gathered), in the caller's transaction.
OrderWriter = Callable[[Order, list[OrderLine], list[dict[str, Any]]], None]


def write_order(order: Order, lines: list[OrderLine], events: list[dict[str, Any]]) -> None:
    """The reference writer: the plain ORM, one insert each for the order, its lines and its events."""
    order.save(force_insert=True)
    OrderLine.objects.bulk_create(lines)
    write_collected(events)


def write_order_together(order: Order, lines: list[OrderLine], events: list[dict[str, Any]]) -> None:
    """The writer checkout uses: the rows ``write_order`` writes (a test compares them), the order
    and its lines in one statement, for half the client CPU (docs/benchmarks.md, figure 6)."""
    insert_together([order], lines)
    write_collected(events)


def checkout(
    *,
    key: str,
    request_hash: str,
    customer_id: str,
    lines: list[Line],
    payment_token: str,
    ship_to: str = "",
    write: OrderWriter = write_order_together,
) -> CheckoutResult:
    for _ in range(2):  # twice at most: once more after freeing an expired key
        try:
            with transaction.atomic():
                _bound_lock_waits()
                placed = _order_place(
                    customer_id=customer_id, lines=lines, payment_token=payment_token, ship_to=ship_to, write=write
                )
                body = order_representation(placed.order, lines=placed.lines, timeline=placed.timeline)
                _key_insert(key=key, request_hash=request_hash, order=placed.order, body=body)
            return CheckoutResult(201, body, replayed=False)
        except _KeyTaken:
            existing = CheckoutRequest.objects.filter(key=key).first()
        except OperationalError as exc:
            if sqlstate_of(exc) == LOCK_NOT_AVAILABLE:
                raise IdempotencyKeyInUse(key) from None
            raise
        if existing is None:
            continue  # it was rolled back meanwhile: the key is free
        if existing.created_at < timezone.now() - timedelta(seconds=setting("IDEMPOTENCY_KEY_TTL")):
            CheckoutRequest.objects.filter(key=key, created_at=existing.created_at).delete()  # expired
            continue
        if existing.request_hash != request_hash:
            raise IdempotencyKeyReused(key)
        return CheckoutResult(existing.response_status, existing.response_body, replayed=True)
    raise IdempotencyKeyInUse(key)


def _bound_lock_waits() -> None:
    """Every lock the checkout's transaction waits for, at most ``IDEMPOTENCY_KEY_WAIT``
    (PostgreSQL: ``lock_timeout``, reset at commit): the key's uncommitted row, and the customer's
    data key, which a first order of the same new customer still in flight holds (the bus creates it
    with the order's event)."""
    if connection.vendor == "postgresql":
        # At least 1 ms: a lock_timeout of 0 means no limit at all.
        wait_ms = max(1, int(setting("IDEMPOTENCY_KEY_WAIT") * 1000))
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = {wait_ms}")


def _key_insert(*, key: str, request_hash: str, order: Order, body: dict) -> None:
    """The key's row with the answer; ``_KeyTaken`` if the key has one. The insert waits on an
    uncommitted row at most ``IDEMPOTENCY_KEY_WAIT`` (``_bound_lock_waits``).
    No savepoint: a taken key rolls the whole transaction back."""
    row = CheckoutRequest(
        key=key,
        request_hash=request_hash,
        response_status=201,
        response_body=body,
        order_id=order.id,
        created_at=order.created_at,
    )
    try:
        insert_together([row])
    except IntegrityError:  # the primary key, the table's only constraint
        raise _KeyTaken(key) from None


def checkout_keys_purge() -> int:
    """Delete keys older than ``IDEMPOTENCY_KEY_TTL``; return how many."""
    cutoff = timezone.now() - timedelta(seconds=setting("IDEMPOTENCY_KEY_TTL"))
    deleted, _ = CheckoutRequest.objects.filter(created_at__lt=cutoff).delete()
    return deleted


def order_place(*, customer_id: str, lines: list[Line], payment_token: str, ship_to: str = "") -> Order:
    """Create a PENDING order from the storefront's prices and announce it, in one transaction."""
    with transaction.atomic():
        placed = _order_place(
            customer_id=customer_id, lines=lines, payment_token=payment_token, ship_to=ship_to, write=write_order
        )
    return placed.order


def _money(amount: Decimal, currency: str) -> dict:
    """Money as orders.order.created v2 writes it (orders/schemas/)."""
    return {"amount": f"{amount:.2f}", "currency": currency}


def _order_place(
    *, customer_id: str, lines: list[Line], payment_token: str, ship_to: str, write: OrderWriter
) -> PlacedOrder:
    """The new order from the storefront's prices (read now), written by ``write`` with its lines
    and its ``orders.order.created`` event. Its saga style is ``SAGA_STYLE`` now, kept on the
    order and in the event (payments charges only a choreographed order; the orchestrator takes
    the orchestrated ones)."""
    prices = dict(StorefrontProduct.objects.filter(sku__in=[line.sku for line in lines]).values_list("sku", "price"))
    unknown = [line.sku for line in lines if line.sku not in prices]
    if unknown:
        raise CheckoutRejected({"items": [f"unknown sku: {sku}" for sku in unknown]})
    priced = [(line, prices[line.sku]) for line in lines]
    total = sum((price * line.quantity for line, price in priced), Decimal("0.00"))
    now = timezone.now()
    order = Order(
        id=uuid.uuid4(),
        customer_id=customer_id,
        status=Order.Status.PENDING,
        failure_reason=None,
        total=total,
        currency=setting("CURRENCY"),
        saga_style=setting("SAGA_STYLE"),
        ship_to=ship_to,
        created_at=now,  # the event's time too; updated_at is the insert's (auto_now)
    )
    order_lines = [
        OrderLine(order=order, sku=line.sku, quantity=line.quantity, unit_price=price) for line, price in priced
    ]
    items = [
        {"sku": line.sku, "quantity": line.quantity, "unit_price": _money(price, order.currency)}
        for line, price in priced
    ]
    event_type = "orders.order.created"
    with collecting() as published:
        event_id = publish(
            event_type=event_type,
            aggregate_type="order",
            aggregate_id=str(order.id),
            occurred_at=order.created_at,
            payload={
                "order_id": str(order.id),
                "customer_id": customer_id,
                "total": _money(total, order.currency),
                "items": items,
                "payment_token": payment_token,
                "saga_style": order.saga_style,
                **({"ship_to": ship_to} if ship_to else {}),
            },
        )
    write(order, order_lines, published)
    created = timeline_entry_of_new_event(event_type=event_type, message_id=str(event_id), occurred_at=now)
    return PlacedOrder(order=order, lines=order_lines, timeline=[created])
