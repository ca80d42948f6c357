"""Forged events of issue 26, row 6: schema-shaped payloads no honest producer sends (or sends
about an order the reader never had), and the exact headers a raw publisher gives them."""

import json
import uuid

NEGATIVE_MONEY = "'-500.00' does not match '^[0-9]+\\\\.[0-9]{2}$'"


def order_created_v2(order_id: str, *, total="10.00", currency="USD", sku="WIDGET", quantity=1) -> dict:
    money = {"amount": total, "currency": currency}
    return {
        "order_id": order_id,
        "customer_id": "forger",
        "total": money,
        "items": [{"sku": sku, "quantity": quantity, "unit_price": money}],
        "payment_token": "tok_visa",
    }


def order_created_v1(order_id: str, *, total="10.00", currency="USD") -> dict:
    return {
        "order_id": order_id,
        "customer_id": "forger",
        "total": total,
        "currency": currency,
        "items": [{"sku": "WIDGET", "quantity": 1, "unit_price": "10.00"}],
        "payment_token": "tok_visa",
    }


def payment_succeeded(order_id: str, *, amount="10.00", currency="USD", items=None) -> dict:
    return {
        "order_id": order_id,
        "amount": amount,
        "currency": currency,
        "charge_id": "ch_forged",
        "items": items or [{"sku": "WIDGET", "quantity": 1, "unit_price": amount}],
    }


def payment_failed(order_id: str) -> dict:
    return {"order_id": order_id, "reason": "payment_declined", "decline_code": "card_declined"}


def stock_reserved(order_id: str, items: list[dict]) -> dict:
    return {"order_id": order_id, "items": items}


def reservation_failed(order_id: str) -> dict:
    return {"order_id": order_id, "reason": "out_of_stock", "skus": ["WIDGET"], "unknown_skus": []}


def order_confirmed(order_id: str, *, total="10.00", currency="USD") -> dict:
    return {"order_id": order_id, "total": total, "currency": currency}


def product_updated(sku: str, *, price="19.99", version=2, available=1000) -> dict:
    return {"sku": sku, "name": "Forged", "price": price, "available": available, "version": version}


def message(event_type: str, payload: dict, *, version: int = 1) -> dict:
    """What ``reliable_messaging._dispatch.decide`` (or ``publish_raw``) takes: body, properties, headers."""
    correlation = payload.get("order_id") or payload.get("sku")
    return {
        "body": json.dumps(payload).encode(),
        "properties": {"message_id": str(uuid.uuid4()), "correlation_id": correlation},
        "headers": {"event_type": event_type, "schema_version": version, "occurred_at": "2026-11-25T12:00:00+00:00"},
    }
