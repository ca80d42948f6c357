"""A load of orders through the checkout API, with cancellations fired at random moments."""

import heapq
import json
import random
import time
import uuid
from collections.abc import Callable
from decimal import Decimal

from django.test import Client

from faultlib.saga import checkout

# The catalogue of the fault runs: plenty of one SKU, a scarce one that runs out.
CATALOG = [("WIDGET", "Widget", Decimal("19.99"), 100_000), ("RARE", "Rare print", Decimal("250.00"), 6)]
INITIAL_STOCK = {sku: stock for sku, _, _, stock in CATALOG}

# tok_timeout: charged, but the first answer is lost (a retry asks again with the same key).
SAFE_TOKENS = ["tok_visa"] * 7 + ["tok_chargeDeclined", "tok_timeout", "tok_nonsense"]


class OrderLoad:
    """Places orders and cancels a share of them at a random moment after their checkout."""

    def __init__(
        self,
        rng: random.Random,
        *,
        tokens: list[str] = SAFE_TOKENS,
        cancel_share: float = 0.0,
        cancel_within: float = 2.0,
        rare_share: float = 0.25,
    ):
        self.rng, self.tokens, self.rare_share = rng, tokens, rare_share
        self.cancel_share, self.cancel_within = cancel_share, cancel_within
        self.client = Client()
        self.orders: dict[str, str] = {}  # order id -> payment token
        self.cancelled: set[str] = set()  # accepted (202)
        self.cancel_refused = 0  # 409: already FAILED or CANCELLED
        self.returned: set[str] = set()  # returns accepted (202)
        self._due: list[tuple[float, str]] = []

    def place(self, token: str | None = None) -> str:
        items = [{"sku": "WIDGET", "quantity": self.rng.randint(1, 3)}]
        if self.rng.random() < self.rare_share:  # RARE runs out: those orders fail with out_of_stock
            items.append({"sku": "RARE", "quantity": 1})
        token = token or self.rng.choice(self.tokens)
        order_id = checkout(self.client, items, token=token, customer=f"cust-{self.rng.randint(1, 9)}")["id"]
        self.orders[order_id] = token
        if self.rng.random() < self.cancel_share:
            heapq.heappush(self._due, (time.monotonic() + self.rng.uniform(0, self.cancel_within), order_id))
        return order_id

    def cancel(self, order_id: str) -> int:
        response = self.client.post(f"/api/orders/{order_id}/cancel/")
        if response.status_code == 202:
            self.cancelled.add(order_id)
        elif response.status_code == 409:
            self.cancel_refused += 1
        else:
            raise AssertionError(f"cancel {order_id}: {response.status_code} {response.content!r}")
        return response.status_code

    def return_order(self, order_id: str) -> None:
        """Return a confirmed order (orders' return saga); it must be accepted."""
        response = self.client.post(f"/api/orders/{order_id}/return/")
        assert response.status_code == 202, f"return {order_id}: {response.status_code} {response.content!r}"
        self.returned.add(order_id)

    def fire_due_cancellations(self) -> None:
        while self._due and self._due[0][0] <= time.monotonic():
            self.cancel(heapq.heappop(self._due)[1])

    def run_while(self, busy: Callable[[], bool], *, max_orders: int, pace=(0.02, 0.15), at_least: int = 0) -> None:
        """Place orders until ``busy`` turns false (and ``at_least`` are placed), at most ``max_orders``."""
        while len(self.orders) < max_orders and (busy() or len(self.orders) < at_least):
            self.place()
            self.fire_due_cancellations()
            time.sleep(self.rng.uniform(*pace))

    def finish(self) -> None:
        """Fire the cancellations still due, each at its moment."""
        while self._due:
            time.sleep(max(0.0, self._due[0][0] - time.monotonic()))
            self.fire_due_cancellations()

    def summary(self) -> str:
        return (
            f"{len(self.orders)} orders placed ({', '.join(f'{n} {t}' for t, n in _count(self.orders.values()))}); "
            f"{len(self.cancelled)} cancellations accepted, {self.cancel_refused} refused (already terminal); "
            f"{len(self.returned)} returns"
        )


def _count(values) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return sorted(counts.items())


def order_created_payload(order_id: str | None = None, **overrides) -> dict:
    payload = {
        "order_id": order_id or str(uuid.uuid4()),
        "customer_id": "poison",
        "total": "10.00",
        "currency": "USD",
        "items": [{"sku": "WIDGET", "quantity": 1, "unit_price": "10.00"}],
        "payment_token": "tok_visa",
    }
    payload.update(overrides)
    return payload


def as_json(payload) -> bytes:
    return json.dumps(payload).encode()
