from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"
    verbose_name = "Orders"

    def ready(self) -> None:
        from messaging.api import register_event_log
        from orders import handlers, operations

        handlers.register()
        # The order timeline reads the event log, so the events consumer runs where orders is hosted.
        register_event_log()
        operations.register()
