"""The platform as an app: what every process of a service does once Django is set up."""

import sys

from django.apps import AppConfig
from django.conf import settings


class PlatformConfig(AppConfig):
    name = "service_platform"
    label = "platform"
    verbose_name = "Service platform"

    def ready(self) -> None:
        from axes.signals import user_locked_out
        from reliable_messaging.operator import context_names, local_consumers

        from service_platform.admin_lockout import log_lockout
        from service_platform.telemetry import configure_tracing

        configure_tracing(
            argv=sys.argv,
            hosted=list(settings.CONTEXTS),
            installed=context_names(),
            consumers=local_consumers(),
        )
        user_locked_out.connect(log_lockout, dispatch_uid="service_platform.admin_lockout")
