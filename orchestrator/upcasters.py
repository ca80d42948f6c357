"""Older versions of the events the orchestrator reads, brought to the newest before its handler."""


def order_created_v1_to_v2(payload: dict) -> dict:
    """v1 gave money as decimal strings with one currency for the order; v2 gives each amount with
    its currency. A v1 order never names a saga style, so it is a choreographed one."""
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
