"""The one read-only ModelAdmin, the bus's (its tables and the contexts' alike)."""

from reliable_messaging.operator import ReadOnlyAdmin

__all__ = ["ReadOnlyAdmin"]
