"""What orders writes for a reader not yet upgraded (``EVENT_VERSIONS`` pins an older version):
each function turns version N+1 of an event into version N (declared under ``downcasters``)."""


def order_created_v2_to_v1(payload: dict) -> dict:
    """v2's money objects back to v1's decimal strings, and the order's currency beside its total."""
    total = payload["total"]
    return {
        "order_id": payload["order_id"],
        "customer_id": payload["customer_id"],
        "total": total["amount"],
        "currency": total["currency"],
        "items": [{**item, "unit_price": item["unit_price"]["amount"]} for item in payload["items"]],
        "payment_token": payload["payment_token"],
    }


def order_created_v3_to_v2(payload: dict) -> dict:
    """v3's shape is v2's: a v2 reader (not yet upgraded) requires the token, so a pin to v2 writes
    it clear (the bus encrypts only where the version's schema lets a reader do without it)."""
    return payload


def order_created_v4_to_v3(payload: dict) -> dict:
    """v4's shape is v3's: a v3 reader (not yet upgraded) requires the customer's id, so a pin to
    v3 writes it clear (and an erasure cannot shred what a pin wrote)."""
    return payload
