from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.db import connections

from reliable_messaging import _amqp_properties as amqp_properties
from reliable_messaging._conf import RETENTIONS, check_settings, duration, setting


class MessagingConfig(AppConfig):
    name = "reliable_messaging"
    # The label names the tables (messaging_outbox, ...), the migrations and the permissions;
    # it stays "messaging" so a database made before the package existed needs no migration.
    label = "messaging"
    verbose_name = "Messaging"

    def ready(self) -> None:
        # Every model is loaded by now, so the hosted contexts' handler modules can be imported.
        from reliable_messaging._contracts import check_contracts
        from reliable_messaging._declarations import check_host_keys, hosted
        from reliable_messaging._event_log import register_event_log
        from reliable_messaging._field_crypto import check_encryption
        from reliable_messaging._registry import register_declared

        check_settings()
        check_host_keys()
        check_encryption()
        amqp_properties.install()
        check_contracts()
        for declaration in hosted():
            register_declared(declaration)
        if any(d.event_log for d in hosted()):
            register_event_log()


@checks.register(checks.Tags.compatibility)
def check_embedded_broker(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The filesystem broker is one machine's: no confirms, no dead-letter exchange, no cluster."""
    if settings.DEBUG or not setting("BROKER_URL").startswith("filesystem"):
        return []
    return [
        checks.Warning(
            "MESSAGING['BROKER_URL'] is the embedded filesystem broker with DEBUG off",
            hint="it is for development and one machine: set BROKER_URL to RabbitMQ (amqp://...) in production",
            id="reliable_messaging.W001",
        )
    ]


@checks.register(checks.Tags.compatibility)
def check_retentions(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[checks.CheckMessage]:
    """A number is seconds: ``14`` meant as days keeps the inbox 14 seconds, and a redelivery later
    than that has a second effect."""
    return [
        checks.Warning(
            f"MESSAGING[{name!r}] is {duration(name)}: shorter than a day",
            hint="a number is seconds; for days give a timedelta (timedelta(days=14))",
            id="reliable_messaging.W002",
        )
        for name in RETENTIONS
        if duration(name) < timedelta(days=1)
    ]


@checks.register(checks.Tags.database)
def check_saga_versions(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[checks.CheckMessage]:
    """An instance keeps the definition version it started with: a deployment that no longer
    registers that version could not move it (run with --database, and by migrate: a database
    not migrated yet has no instances)."""
    from reliable_messaging._saga_engine import versions_not_runnable
    from reliable_messaging.models import SagaInstance

    table = SagaInstance._meta.db_table
    return [
        checks.Error(
            f"saga {missing} has instances in flight in database {alias!r} and is not registered",
            hint="keep registering that version of the definition until its instances end",
            id="reliable_messaging.E001",
        )
        for alias in kwargs.get("databases") or ()
        if table in connections[alias].introspection.table_names()
        for missing in versions_not_runnable(using=alias)
    ]
