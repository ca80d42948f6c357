from django.apps import AppConfig


class MessagingConfig(AppConfig):
    name = "messaging"
    verbose_name = "Messaging"

    def ready(self) -> None:
        from messaging.event_log import event_log_record
        from messaging.registry import ANY_EVENT, register_handler

        # The event log records every event, whatever its type or schema version.
        register_handler(consumer="events", event_type=ANY_EVENT, handler=event_log_record, schema_versions=())
