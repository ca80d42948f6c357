"""Dotted paths, as the declarations name handlers, upcasters and downcasters: the function each
one names. Below both the registry (handlers) and the contracts (upcasters, downcasters)."""

from collections.abc import Callable
from importlib import import_module
from typing import Any


def resolve(dotted: str) -> Callable[..., Any]:
    """``package.module.function`` -> the function; ImportError or AttributeError name the path."""
    module, _, name = dotted.rpartition(".")
    try:
        function: Callable[..., Any] = getattr(import_module(module), name)
        return function
    except AttributeError:
        raise AttributeError(f"handler {dotted}: {module} has no {name}") from None
