"""The operator pages' filters: the bus's (``{% load ops %}`` in this project's templates)."""

from reliable_messaging.templatetags.messaging_display import age, breakable_key, compact_time, register, short

__all__ = ["age", "breakable_key", "compact_time", "register", "short"]
