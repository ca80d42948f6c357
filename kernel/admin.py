"""The one read-only ModelAdmin, the bus's (its tables and the contexts' alike)."""

from reliable_messaging.admin_base import ReadOnlyAdmin

__all__ = ["ReadOnlyAdmin"]
