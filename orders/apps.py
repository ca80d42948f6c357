from django.apps import AppConfig

from orders.conf import setting


class OrdersConfig(AppConfig):
    name = "orders"
    verbose_name = "Orders"

    def ready(self) -> None:
        from reliable_messaging import sagas

        from orders import operations
        from orders.services.returns import return_saga

        sagas.register(return_saga())
        operations.register()
        refuse_orchestration_without_its_event()


def refuse_orchestration_without_its_event() -> None:
    """Orchestrated orders are told apart by the saga style that ``orders.order.created`` carries
    from v2 on. Written as v1 they would all be charged by the choreography's participants, never
    orchestrated, then failed at their deadline and refunded."""
    from django.core.exceptions import ImproperlyConfigured
    from reliable_messaging.api import written_version

    if setting("SAGA_STYLE") == "orchestration" and written_version("orders.order.created") < 2:
        raise ImproperlyConfigured(
            "SAGA_STYLE=orchestration needs orders.order.created v2 (v1 carries no saga style), "
            "but EVENT_VERSIONS pins it to v1: finish the rollout of v2 first, or keep the choreography"
        )
