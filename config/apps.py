"""The composition root as an app: what every process does once Django is set up."""

import sys

from django.apps import AppConfig
from django.conf import settings


class ShopConfig(AppConfig):
    name = "config"
    label = "shop"
    verbose_name = "Saga shop"

    def ready(self) -> None:
        from config.telemetry import configure_tracing
        from kernel.contexts import installed, names
        from messaging.api import local_consumers

        configure_tracing(
            argv=sys.argv,
            hosted=list(settings.CONTEXTS),
            installed=names(installed()),
            consumers=local_consumers(),
        )
