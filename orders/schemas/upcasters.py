"""Orders' upcasters, beside the schemas they bridge: part of its events' contract, as the schemas
are, and carried wherever they are. A reader of an event with several versions binds these steps
in its own ``upcasters`` module (kernel/upcasters.py) instead of copying them. Plain functions of
the payload, importing nothing: a reader's process runs them without orders' code."""


def order_created_v1_to_v2(payload: dict) -> dict:
    """v1 gave money as decimal strings, with one currency for the order: v2 gives each amount
    with its currency. (A v1 order never names a saga style: it is a choreographed one.)"""
    currency = payload["currency"]
    return {
        "order_id": payload["order_id"],
        "customer_id": payload["customer_id"],
        "total": {"amount": payload["total"], "currency": currency},
        "items": [
            {**item, "unit_price": {"amount": item["unit_price"], "currency": currency}} for item in payload["items"]
        ],
        "payment_token": payload["payment_token"],
    }


def order_created_v2_to_v3(payload: dict) -> dict:
    """v3 is v2's shape with the payment token no longer required: orders writes it encrypted for
    payments alone, so every other reader receives the order without it. A v2 order still carries
    it clear, as it was written; a reader that may not read it ignores it."""
    return payload


def order_created_v3_to_v4(payload: dict) -> dict:
    """v4 is v3's shape with the customer's id no longer required: orders seals it under the
    customer's own key, readable by no consumer. A v3 order still carries it clear, as it was
    written; a reader ignores it."""
    return payload


# event type -> its steps, one per version: [v1 -> v2, v2 -> v3, ...]
UPCASTERS = {"orders.order.created": [order_created_v1_to_v2, order_created_v2_to_v3, order_created_v3_to_v4]}
