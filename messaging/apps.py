from django.apps import AppConfig

from messaging import amqp_properties


class MessagingConfig(AppConfig):
    name = "messaging"
    verbose_name = "Messaging"

    def ready(self) -> None:
        # Every model is loaded by now, so the hosted contexts' handler modules can be imported.
        from kernel.contexts import hosted
        from messaging.contracts import check_contracts
        from messaging.event_log import register_event_log
        from messaging.registry import register_declared

        amqp_properties.install()
        check_contracts()
        for declaration in hosted():
            register_declared(declaration)
        if any(d.event_log for d in hosted()):
            register_event_log()
