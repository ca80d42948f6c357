"""The composition root as an app: what every process does once Django is set up."""

import sys

from django.apps import AppConfig
from django.conf import settings


class ShopConfig(AppConfig):
    name = "config"
    label = "shop"
    verbose_name = "Saga shop"

    def ready(self) -> None:
        from axes.signals import user_locked_out
        from reliable_messaging.operator import context_names, local_consumers

        from config.admin_lockout import log_lockout
        from config.telemetry import configure_tracing

        configure_tracing(
            argv=sys.argv,
            hosted=list(settings.CONTEXTS),
            installed=context_names(),
            consumers=local_consumers(),
        )
        user_locked_out.connect(log_lockout, dispatch_uid="config.admin_lockout")
