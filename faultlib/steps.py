"""What the installed contexts offer the fault tests and ``make chaos``: each one's
``<package>/tests/steps.py`` (test code its production code never imports) defines the steps a
test takes on its side (place an order, stock a product, run the gateway worker once) and the
facts it reads back. faultlib imports no context: it asks for a step by name."""

from typing import Any

from faultlib.invariants import context_support


def offered(name: str) -> Any:
    """The step (or fact) ``name`` from the one installed context whose ``<package>/tests/steps.py`` defines it."""
    offers = [(context, getattr(module, name)) for context, module in context_support("steps") if hasattr(module, name)]
    if len(offers) != 1:
        by = ", ".join(context for context, _ in offers) or "no installed context"
        raise LookupError(f"{name!r} is offered by {by}: exactly one context's <package>/tests/steps.py must define it")
    return offers[0][1]
