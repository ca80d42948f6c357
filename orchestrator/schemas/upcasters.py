"""The orchestrator's upcasters, beside the schemas they bridge: bound by each reader in its own
``upcasters`` module (kernel/upcasters.py). Plain functions of the payload, importing nothing."""


def payment_charge_v1_to_v2(payload: dict) -> dict:
    """v2 no longer carries the payment token (payments keeps it from orders.order.created). A v1
    command, sent by an orchestrator not yet upgraded, keeps its clear token: payments charges with
    it an order whose creation it handled before its own upgrade, when it kept no token."""
    return payload


# event type -> its steps, one per version: [v1 -> v2, ...]
UPCASTERS = {"orchestrator.payment.charge": [payment_charge_v1_to_v2]}
