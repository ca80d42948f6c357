from django.apps import AppConfig


class OperationsConfig(AppConfig):
    """The operator's views of the saga (the overview, an order's swimlane and timeline), read
    through the bus's public API (``reliable_messaging.operator``) and never a context's code."""

    name = "operations"
    verbose_name = "Operations"
