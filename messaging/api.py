"""messaging's public interface: the only module the bounded contexts import.

- ``publish(...)`` writes an event to the outbox inside the caller's transaction (inside
  ``collecting()`` it hands the row over instead, for ``outbox_statements`` to write it with
  the caller's own statements in one round trip); with ``deliver_at`` it is scheduled, published
  at or after that time, and ``cancel_scheduled(message_id)`` withdraws it until then;
  ``publish_again`` sends an event already written once more, same message id (a repeated reply);
- a context's handlers are named in its declaration (``<context>/context.toml``, under
  ``consumes``), which also binds its queue; messaging subscribes them when it is ready, and
  runs the ``events`` consumer (the event log the timeline reads) where a hosted context
  declares ``event_log = true``;
- handlers receive an ``IncomingEvent`` and raise ``InvalidPayload`` for a payload that can
  never be handled (dead-lettered at once) or anything else to be retried;
- ``timeline_for`` reads every event of one saga (a correlation id) across all contexts (and
  ``timeline_entry_of_new_event`` shows one just published) as ``TimelineEntry`` values;
  ``timeline_waiting`` says where such a timeline is still waiting (outbox, consumer, dead
  letter) as ``WaitingPlace`` values, and ``yet_to_handle`` which subscribed consumers have
  not handled each entry yet;
- ``mask_sensitive`` / ``mask_text`` hide sensitive fields (``SENSITIVE_FIELDS``) outside their context;
- ``outbox_backlog``, ``scheduled_backlog`` (and ``scheduled_delivery_time``), ``dead_letter_counts``,
  ``oldest_waiting_dead_letters``, ``local_consumers``, ``system_consumers`` (every queue's, hosted here or not) and
  ``broker_reachable`` serve the operators' pages, health checks and metrics;
- ``fault_point`` names a place where crash tests stop a process (``FAULT_POINT``; inert otherwise);
- ``enable_tracing``, ``server_span``, ``span_in_use``, ``trace_headers`` and ``trace_ids`` let
  the composition root set up OpenTelemetry and serve requests inside a span (``messaging.telemetry``).
"""

from messaging.diagnosis import command_in_deployment, timeline_waiting, yet_to_handle
from messaging.dispatch import InvalidPayload, TransientError
from messaging.envelope import IncomingEvent
from messaging.faults import fault_point
from messaging.health import broker_reachable, database_reachable
from messaging.lifecycle import DATABASE_BACKOFF_MAX, Backoff, Stopper, use_dedicated_connections
from messaging.masking import mask_sensitive, mask_text
from messaging.outbox import (
    OutsideTransactionError,
    caused_by,
    collecting,
    current_cause,
    outbox_statements,
    publish,
    publish_again,
)
from messaging.payloads import payload_uuid
from messaging.registry import local_consumers
from messaging.scheduled import ScheduledBacklog, cancel_scheduled, scheduled_backlog, scheduled_delivery_time
from messaging.selectors import (
    BacklogPoint,
    OldestDeadLetter,
    OutboxBacklog,
    dead_letter_counts,
    dead_letter_counts_by_state,
    oldest_waiting_dead_letters,
    outbox_backlog,
    outbox_backlog_history,
    timeline_entry_of_new_event,
    timeline_for,
)
from messaging.serve_metrics import serve_metrics
from messaging.telemetry import current as span_in_use
from messaging.telemetry import enable as enable_tracing
from messaging.telemetry import ids_of as trace_ids
from messaging.telemetry import server_span, trace_headers
from messaging.timeline import DeadLetterMark, Handling, TimelineEntry, WaitingPlace, YetToHandle
from messaging.topology import consumers as system_consumers

__all__ = [
    "ScheduledBacklog",
    "cancel_scheduled",
    "scheduled_backlog",
    "scheduled_delivery_time",
    "DATABASE_BACKOFF_MAX",
    "Backoff",
    "BacklogPoint",
    "DeadLetterMark",
    "Handling",
    "IncomingEvent",
    "InvalidPayload",
    "OldestDeadLetter",
    "OutboxBacklog",
    "OutsideTransactionError",
    "Stopper",
    "TimelineEntry",
    "TransientError",
    "broker_reachable",
    "caused_by",
    "collecting",
    "current_cause",
    "command_in_deployment",
    "dead_letter_counts",
    "database_reachable",
    "dead_letter_counts_by_state",
    "enable_tracing",
    "fault_point",
    "local_consumers",
    "mask_sensitive",
    "mask_text",
    "oldest_waiting_dead_letters",
    "outbox_backlog",
    "outbox_backlog_history",
    "outbox_statements",
    "payload_uuid",
    "publish",
    "publish_again",
    "serve_metrics",
    "server_span",
    "span_in_use",
    "system_consumers",
    "timeline_entry_of_new_event",
    "timeline_for",
    "timeline_waiting",
    "trace_headers",
    "trace_ids",
    "use_dedicated_connections",
    "WaitingPlace",
    "YetToHandle",
    "yet_to_handle",
]
