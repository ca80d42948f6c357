"""Dotted paths, as the declarations name handlers, upcasters and downcasters: the function each
one names. Below both the registry (handlers) and the contracts (upcasters, downcasters)."""

from collections.abc import Callable
from importlib import import_module


def resolve(dotted: str) -> Callable:
    """``package.module.function`` -> the function; ImportError or AttributeError name the path."""
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(import_module(module), name)
    except AttributeError:
        raise AttributeError(f"handler {dotted}: {module} has no {name}") from None
