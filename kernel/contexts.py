"""The bounded contexts a deployment can host (``CONTEXTS``), and the commands each one brings.

A deployment runs from a tree that may lack the other contexts' packages, so it cannot ask
them; this table lets it say where a command lives instead of "Unknown command".
"""

CONTEXTS: tuple[str, ...] = ("orders", "payments", "inventory")

COMMANDS: dict[str, str] = {
    "expire_pending_orders": "orders",
    "gateway_ledger": "payments",
    "seed_catalog": "inventory",
}


def parse_contexts(names: list[str]) -> list[str]:
    """``CONTEXTS`` as given, checked, in canonical order; ValueError names what is wrong."""
    wanted = {name.strip() for name in names if name.strip()}
    if unknown := sorted(wanted - set(CONTEXTS)):
        raise ValueError(f"CONTEXTS names unknown contexts {unknown}; choose among {', '.join(CONTEXTS)}")
    if not wanted:
        raise ValueError(f"CONTEXTS is empty; choose among {', '.join(CONTEXTS)}")
    return [name for name in CONTEXTS if name in wanted]
