"""Bounded contexts stay splittable: no model relation crosses a context's border.

import-linter (run by ``make test``) checks the Python imports; string references such as
``ForeignKey("other_app.Model")`` are invisible to it, so this test checks the models.
"""

from django.apps import apps
from kernel.topology import CONSUMERS, subscribers_of

from messaging import registry

CONTEXTS = {"orders", "payments", "inventory", "messaging"}


def test_no_model_relation_crosses_a_context():
    crossings = []
    for model in apps.get_models():
        own = model._meta.app_label
        if own not in CONTEXTS:
            continue
        for field in model._meta.get_fields():
            related = getattr(field, "related_model", None)
            if related is not None and related._meta.app_label != own:
                crossings.append(f"{own}.{model.__name__}.{field.name} -> {related._meta.label}")
    assert crossings == []


def test_each_queue_is_bound_to_exactly_the_keys_its_context_handles():
    assert registry.binding_keys("orders") == [
        "inventory.product.updated",
        "inventory.stock.reservation_failed",
        "inventory.stock.reserved",
        "payments.payment.failed",
    ]
    assert registry.binding_keys("payments") == [
        "inventory.stock.reservation_failed",
        "orders.order.cancelled",
        "orders.order.created",
        "orders.order.failed",
    ]
    assert registry.binding_keys("inventory") == [
        "orders.order.cancelled",
        "orders.order.failed",
        "payments.payment.succeeded",
    ]
    assert registry.binding_keys("events") == ["#"]


def test_every_hosted_consumer_handles_exactly_what_its_queue_is_bound_to():
    # An unhandled binding would dead-letter every such message as unknown_event_type; a handler
    # for an unbound key would never run. registry.register_handler refuses the second; this the first.
    assert registry.local_consumers() == list(CONSUMERS)  # the monolith hosts every consumer
    for consumer in CONSUMERS:
        assert registry.registered_keys(consumer) == registry.binding_keys(consumer), consumer


def test_every_saga_event_has_a_subscriber_besides_the_event_log():
    for event_type in [
        "orders.order.created",
        "payments.payment.succeeded",
        "payments.payment.failed",
        "inventory.stock.reserved",
        "inventory.stock.reservation_failed",
        "orders.order.cancelled",
        "orders.order.failed",
        "inventory.product.updated",
    ]:
        assert len(subscribers_of(event_type)) >= 2, event_type
