"""Shipping as the bus reads its declaration (shipping/context.toml): it follows the order saga and
never decides it, and its queue is bound to the two outcomes of orders it acts on and to the
return saga's two commands (orders hosts that saga: they are bound wherever orders is)."""

from reliable_messaging.operator import installed_contexts


def test_shipping_follows_the_saga_on_the_confirmation_and_the_cancellation():
    (shipping,) = [d for d in installed_contexts() if d.name == "shipping"]
    assert shipping.extra["follows"] is True
    assert sorted(shipping.consumes) == [
        "orders.order.cancelled",
        "orders.order.confirmed",
        "orders.return.book_pickup",
        "orders.return.cancel_pickup",
    ]
