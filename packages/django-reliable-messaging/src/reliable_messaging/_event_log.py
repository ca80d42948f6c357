"""The ``events`` consumer: records every event on the bus for the saga timeline."""

from django.utils.dateparse import parse_datetime

from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._masking import mask_sensitive
from reliable_messaging._registry import register_handler
from reliable_messaging._runs import in_runs
from reliable_messaging._topology import ANY_EVENT, EVENT_LOG_CONSUMER
from reliable_messaging.models import EventLogEntry


@in_runs
def event_log_record(events: list[IncomingEvent]) -> None:
    """One insert for a run of events; an event recorded already is left as it is."""
    EventLogEntry.objects.bulk_create(
        [
            EventLogEntry(
                message_id=event.message_id,
                event_type=event.event_type,
                schema_version=event.schema_version,
                correlation_id=event.correlation_id[:100],
                causation_id=event.causation_id[:255],
                occurred_at=parse_datetime(event.occurred_at) if event.occurred_at else None,
                payload=mask_sensitive(event.payload, keep_encrypted=True),
            )
            for event in events
        ],
        ignore_conflicts=True,
    )


def register_event_log() -> None:
    """Run the ``events`` consumer in this deployment: every event, whatever its type or version."""
    register_handler(
        consumer=EVENT_LOG_CONSUMER,
        event_type=ANY_EVENT,
        handler=event_log_record,
        schema_versions=(),
    )
