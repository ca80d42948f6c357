"""messaging's public interface: the only module the bounded contexts import.

- ``publish(...)`` writes an event to the outbox inside the caller's transaction (inside
  ``collecting()`` it hands the row over instead, for ``outbox_statements`` to write it with
  the caller's own statements in one round trip);
- ``register_handler(...)`` subscribes a context's function to an event type (its queue's
  bindings are declared in ``kernel.topology``); ``register_event_log()`` runs the ``events``
  consumer in this deployment, which records every event for the timeline;
- handlers receive an ``IncomingEvent`` and raise ``InvalidPayload`` for a payload that can
  never be handled (dead-lettered at once) or anything else to be retried;
- ``timeline_for`` reads every event of one saga (a correlation id) across all contexts (and
  ``timeline_entry_of_new_event`` shows one just published); ``timeline_waiting``
  says where such a timeline is still waiting (outbox, consumer, dead letter);
- ``mask_sensitive`` / ``mask_text`` hide payment tokens outside payments;
- ``outbox_backlog``, ``dead_letter_counts``, ``local_consumers`` and ``broker_reachable``
  serve the operators' pages, health checks and metrics.
"""

from messaging.diagnosis import command_in_deployment, timeline_waiting
from messaging.dispatch import InvalidPayload, TransientError
from messaging.envelope import IncomingEvent
from messaging.event_log import register_event_log
from messaging.health import broker_reachable
from messaging.lifecycle import Stopper, use_dedicated_connections
from messaging.masking import mask_sensitive, mask_text
from messaging.outbox import OutsideTransactionError, collecting, outbox_statements, publish, tracing
from messaging.registry import local_consumers, register_handler
from messaging.selectors import (
    dead_letter_counts,
    dead_letter_counts_by_state,
    outbox_backlog,
    outbox_backlog_history,
    timeline_entry_of_new_event,
    timeline_for,
)
from messaging.serve_metrics import serve_metrics
from messaging.tracecontext import child_span, trace_id_of

__all__ = [
    "IncomingEvent",
    "InvalidPayload",
    "OutsideTransactionError",
    "Stopper",
    "TransientError",
    "broker_reachable",
    "child_span",
    "collecting",
    "command_in_deployment",
    "dead_letter_counts",
    "dead_letter_counts_by_state",
    "local_consumers",
    "mask_sensitive",
    "mask_text",
    "outbox_backlog",
    "outbox_backlog_history",
    "outbox_statements",
    "publish",
    "register_event_log",
    "register_handler",
    "serve_metrics",
    "timeline_entry_of_new_event",
    "timeline_for",
    "timeline_waiting",
    "trace_id_of",
    "tracing",
    "use_dedicated_connections",
]
