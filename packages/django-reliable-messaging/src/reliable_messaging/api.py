"""What a bounded context uses of the bus: the one module its code imports.

- ``publish(...)`` writes an event to the outbox inside the caller's transaction (inside
  ``collecting()`` it hands the row over instead, and ``write_collected(rows)`` writes all the rows
  collected with one insert, in the same transaction); with ``deliver_at`` it is
  scheduled, published at or after that time, and ``cancel_scheduled(message_id)`` withdraws it
  until then; ``publish_again`` sends an event already written once more, same message id;
  ``written_version(event_type)`` is the version it writes (the newest, or ``EVENT_VERSIONS``'s pin);
- a context's handlers are named in its declaration (``<context>/context.toml``, under
  ``consumes``), which also binds its queue; the bus subscribes them when it is ready;
- handlers receive an ``IncomingEvent``; one marked ``@in_runs`` receives a run of them instead (a
  batch's consecutive messages at once, a list of one for a message decided alone), each
  message's work inside ``in_turn(event)`` (reliable_messaging._runs); they raise
  ``InvalidPayload`` for a payload that can never be handled (dead-lettered at once),
  ``TransientError`` (or anything else) to be retried;
- a context's own long-running process (a worker beside the consumers) uses ``Stopper``,
  ``Backoff``, ``use_dedicated_connections``, ``refuse_unmigrated_database`` and ``serve_metrics``
  as the relay and consumers do;
- ``erase_subject(subject)`` deletes a data subject's key: the fields its context declares
  ``[personal]`` become unreadable in every copy (reliable_messaging._subject_keys);
- ``fault_point`` names a place where crash tests stop a process (``FAULT_POINT``; inert otherwise).

The operator's reads are in ``reliable_messaging.operator``; the composition root's tracing in
``reliable_messaging.hosting``; the test harness in ``reliable_messaging.testing``.
"""

from reliable_messaging._contracts import written_version
from reliable_messaging._dispatch import InvalidPayload, TransientError
from reliable_messaging._envelope import IncomingEvent
from reliable_messaging._faults import fault_point
from reliable_messaging._lifecycle import (
    DATABASE_BACKOFF_MAX,
    Backoff,
    Stopper,
    refuse_unmigrated_database,
    use_dedicated_connections,
)
from reliable_messaging._outbox import (
    OutsideTransactionError,
    UnpublishableEvent,
    caused_by,
    collecting,
    current_cause,
    publish,
    publish_again,
    write_collected,
)
from reliable_messaging._payloads import payload_uuid
from reliable_messaging._runs import Turn, in_runs, in_turn
from reliable_messaging._scheduled import cancel_scheduled, scheduled_delivery_time
from reliable_messaging._serve_metrics import serve_metrics
from reliable_messaging._subject_keys import erase_subject

__all__ = [
    "DATABASE_BACKOFF_MAX",
    "Backoff",
    "IncomingEvent",
    "InvalidPayload",
    "OutsideTransactionError",
    "Stopper",
    "TransientError",
    "Turn",
    "UnpublishableEvent",
    "cancel_scheduled",
    "caused_by",
    "collecting",
    "current_cause",
    "erase_subject",
    "fault_point",
    "in_runs",
    "in_turn",
    "payload_uuid",
    "publish",
    "publish_again",
    "refuse_unmigrated_database",
    "scheduled_delivery_time",
    "serve_metrics",
    "use_dedicated_connections",
    "write_collected",
    "written_version",
]
