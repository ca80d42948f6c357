"""Orders' page tests read an order placed through its API."""

from orders.tests.fixtures import order_id, staff

__all__ = ["order_id", "staff"]
