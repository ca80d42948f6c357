"""The operator pages' filters: the bus's (``{% load ops %}`` in this project's templates)."""

from reliable_messaging.operator import age, breakable_key, compact_time, short
from reliable_messaging.operator import display_filters as register

__all__ = ["age", "breakable_key", "compact_time", "register", "short"]
