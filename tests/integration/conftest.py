"""The integration tier's admin and page tests read an order placed through orders' API."""

from orders.tests.fixtures import order_id, staff

__all__ = ["order_id", "staff"]
