"""What the operator's pages, health checks and metrics read of the bus (never a context's code).

- ``timeline_for`` reads every event of one correlation id across all contexts (and
  ``timeline_entry_of_new_event`` shows one just published) as ``TimelineEntry`` values;
  ``timeline_waiting`` says where such a timeline is still waiting (outbox, consumer, dead
  letter) as ``WaitingPlace`` values, ``yet_to_handle`` which subscribed consumers have not
  handled each entry yet, and ``command_in_deployment`` the command to run where a consumer lives;
- ``outbox_backlog`` (and its history), ``scheduled_backlog``, ``dead_letter_counts`` (by state),
  ``oldest_waiting_dead_letters``, ``local_consumers``, ``system_consumers`` (every queue's,
  hosted here or not), ``broker_reachable``, ``database_reachable`` and ``unmigrated_apps``;
- ``installed_contexts``, ``context_names`` and ``event_kind`` read the contexts' declarations
  (the swimlane's lanes and colours);
- ``mask_sensitive`` / ``mask_text`` hide sensitive fields (``SENSITIVE_FIELDS``);
- ``register_correlation_link`` tells the bus's admin where the page about a correlation id is;
- the host's own operator pages look like the bus's: ``ReadOnlyAdmin`` for the tables only services
  change, the template filters ``display_filters`` (``age``, ``short``, ``compact_time``,
  ``breakable_key``) and ``format_duration``;
- ``RELAY_APPLICATION_NAME`` is how a relay's session shows in ``pg_stat_activity``.
"""

from reliable_messaging._admin_base import ReadOnlyAdmin
from reliable_messaging._declarations import event_kind, installed, names
from reliable_messaging._diagnosis import command_in_deployment, timeline_waiting, yet_to_handle
from reliable_messaging._health import broker_reachable, database_reachable, unmigrated_apps
from reliable_messaging._links import register_correlation_link
from reliable_messaging._masking import mask_sensitive, mask_text
from reliable_messaging._registry import local_consumers
from reliable_messaging._relay import APPLICATION_NAME as RELAY_APPLICATION_NAME
from reliable_messaging._scheduled import ScheduledBacklog, scheduled_backlog
from reliable_messaging._selectors import (
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
from reliable_messaging._timeline import DeadLetterMark, Handling, TimelineEntry, WaitingPlace, YetToHandle
from reliable_messaging._topology import consumers as system_consumers
from reliable_messaging.templatetags.messaging_display import (
    age,
    breakable_key,
    compact_time,
    format_duration,
    short,
)
from reliable_messaging.templatetags.messaging_display import register as display_filters

installed_contexts = installed


def context_names() -> list[str]:
    return names(installed())


__all__ = [
    # The host's admin pages and templates, as the bus's own: read-only tables, the same filters
    # (a template library's ``register`` may be ``display_filters`` itself) and durations.
    "ReadOnlyAdmin",
    "age",
    "breakable_key",
    "compact_time",
    "display_filters",
    "format_duration",
    "short",
    # Where an operator finds the relay's sessions (pg_stat_activity.application_name).
    "RELAY_APPLICATION_NAME",
    # The operator's reads.
    "BacklogPoint",
    "DeadLetterMark",
    "Handling",
    "OldestDeadLetter",
    "OutboxBacklog",
    "ScheduledBacklog",
    "TimelineEntry",
    "WaitingPlace",
    "YetToHandle",
    "broker_reachable",
    "command_in_deployment",
    "context_names",
    "database_reachable",
    "unmigrated_apps",
    "dead_letter_counts",
    "dead_letter_counts_by_state",
    "event_kind",
    "installed_contexts",
    "local_consumers",
    "mask_sensitive",
    "mask_text",
    "oldest_waiting_dead_letters",
    "outbox_backlog",
    "outbox_backlog_history",
    "register_correlation_link",
    "scheduled_backlog",
    "system_consumers",
    "timeline_entry_of_new_event",
    "timeline_for",
    "timeline_waiting",
    "yet_to_handle",
]
