from django.apps import AppConfig

from reliable_messaging import amqp_properties


class MessagingConfig(AppConfig):
    name = "reliable_messaging"
    # The label names the tables (messaging_outbox, ...), the migrations and the permissions;
    # it stays "messaging" so a database made before the package existed needs no migration.
    label = "messaging"
    verbose_name = "Messaging"

    def ready(self) -> None:
        # Every model is loaded by now, so the hosted contexts' handler modules can be imported.
        from reliable_messaging.contracts import check_contracts
        from reliable_messaging.declarations import hosted
        from reliable_messaging.event_log import register_event_log
        from reliable_messaging.registry import register_declared

        amqp_properties.install()
        check_contracts()
        for declaration in hosted():
            register_declared(declaration)
        if any(d.event_log for d in hosted()):
            register_event_log()
