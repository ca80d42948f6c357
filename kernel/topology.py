"""Every queue of the system and the routing keys bound to it: one declaration, as data.

Every relay and every consumer process declares all of it, whatever contexts its deployment
hosts. So a message always has a queue to wait in, even when its consumer's deployment has
never started yet (an unbound key would reach only the event log, or on the filesystem broker
nothing at all). Each context registers its handlers from its ``AppConfig.ready()``;
``messaging`` refuses a handler for a key its queue is not bound to, and a test keeps the
handlers and these bindings equal.

The queue of consumer ``C`` is ``C_queue``. ``events`` is messaging's event log (the order
timeline reads it): bound to every key, it runs where ``orders`` is hosted.
"""

ANY_EVENT = "#"

QUEUE_BINDINGS: dict[str, tuple[str, ...]] = {
    "orders": (
        "inventory.product.updated",
        "inventory.stock.reservation_failed",
        "inventory.stock.reserved",
        "payments.payment.failed",
    ),
    "payments": (
        "inventory.stock.reservation_failed",
        "orders.order.cancelled",
        "orders.order.created",
        "orders.order.failed",
    ),
    "inventory": (
        "orders.order.cancelled",
        "orders.order.failed",
        "payments.payment.succeeded",
    ),
    "events": (ANY_EVENT,),
}

CONSUMERS: tuple[str, ...] = tuple(QUEUE_BINDINGS)


def subscribers_of(event_type: str) -> list[str]:
    """The consumers whose queue receives ``event_type``, in declaration order."""
    return [c for c, keys in QUEUE_BINDINGS.items() if event_type in keys or ANY_EVENT in keys]
