"""Older versions of the events payments reads, brought to the newest before its handler sees
them (declared under ``upcasters``); keep each as long as docs/evolving-events.md says."""


def order_created_v1_to_v2(payload: dict) -> dict:
    """v1 gave money as decimal strings, with one currency for the order: v2 gives each amount
    with its currency."""
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
