"""Helpers for tests that drive whole sagas through the API and real processes."""

import json
import uuid
from decimal import Decimal

from django.test import Client
from reliable_messaging.hosting import context_of, installed

from fake_gateway.ledger import money_moved
from faultlib.invariants import system_state
from faultlib.processes import wait_until
from faultlib.steps import offered


def asserted(event_types, *followers: str) -> list:
    """The events, in their order, of the saga's participants and of the ``followers`` named: what a
    saga test asserts exactly. Another follower's (a context added later) are its own tests' business.
    ``event_types`` may hold (event type, ...) tuples: their first item is the type."""
    # The saga's participants: the contexts that do not only follow it (the project's key "follows").
    keep = {*(d.name for d in installed() if not d.extra.get("follows")), *followers}
    return [e for e in event_types if context_of(e if isinstance(e, str) else e[0]) in keep]


CATALOG = [("WIDGET", "Widget", Decimal("19.99"), 1000), ("RARE", "Rare print", Decimal("250.00"), 3)]


def seed_catalog(processes_running: bool = True, catalog=CATALOG) -> None:
    """Create products in inventory; with the saga running, wait for the storefront copy."""
    for sku, name, price, stock in catalog:
        offered("product_stocked")(sku=sku, name=name, price=price, stock=stock)
    if processes_running:
        storefront_size = offered("storefront_size")
        wait_until(
            lambda: storefront_size() == len(catalog),
            timeout=30,
            message="the storefront copy",
            seen=lambda: {"storefront": storefront_size(), **system_state()},
        )


def checkout(client: Client, items, token="tok_visa", customer="cust", key=None, ship_to: str = "") -> dict:
    body = {
        "customer_id": customer,
        "items": items,
        "payment_token": token,
        **({"ship_to": ship_to} if ship_to else {}),
    }
    response = client.post(
        "/api/checkout/",
        json.dumps(body),
        content_type="application/json",
        headers={"Idempotency-Key": key or str(uuid.uuid4())},
    )
    assert response.status_code == 201, response.content
    return response.json()


def wait_terminal(order_ids, timeout: float = 60) -> None:
    ids = [uuid.UUID(str(i)) for i in order_ids]
    pending = offered("orders_pending")
    wait_until(
        lambda: not pending(ids),
        timeout=timeout,
        message=f"{len(ids)} order(s) to reach a terminal state",
    )


def ledger(order_id) -> list[tuple[str, Decimal]]:
    return [(op.kind, op.amount) for op in money_moved(order_id=str(order_id))]


def stock(sku: str) -> int:
    return offered("stock")(sku)
