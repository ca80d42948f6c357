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


# event type -> its steps, one per version: [v1 -> v2, v2 -> v3, ...]
UPCASTERS = {"orders.order.created": [order_created_v1_to_v2]}
