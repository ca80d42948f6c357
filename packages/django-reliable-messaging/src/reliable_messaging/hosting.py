"""What the composition root uses to host the bus (its settings, URLs, start-up, deployment commands).

- OpenTelemetry for its spans: ``enable_tracing``, ``server_span``, ``span_in_use``,
  ``trace_headers``, ``trace_ids``;
- the contexts' declarations (``context.toml``), read before Django's apps are (the settings list
  the hosted contexts from them): ``read_declarations``, ``known_packages``, ``parse_contexts``,
  ``installed``, ``hosted``, ``names``, ``command_owners``, and the vocabulary that checks a new one;
- the topology the declarations make (which consumers, bound to which routing keys) and the names
  the settings give it: ``consumers``, ``queue_bindings``, ``subscribers_of``, ``exchange_name``,
  ``queue_name``;
- the broker, once Django is set up: ``declare_queues`` before a deployment takes traffic,
  ``broker_connection`` for a look at it;
- PostgreSQL as the bus's workers use it: their session limits (``apply_session_timeouts``) and the
  SQLSTATEs they act on (``sqlstate_of``), for the web process's own handling;
- the bus's own checks, for the host's edges: ``nested_deeper_than`` (a body's nesting, before
  parsing it) and ``mask_sensitive`` / ``mask_text`` (the ``SENSITIVE_FIELDS``, for its log lines).

Importing this module loads neither Django's apps nor the bus's models: ``settings.py`` imports it.
"""

from collections.abc import Iterable
from typing import TYPE_CHECKING

from reliable_messaging._conf import exchange_name, queue_name
from reliable_messaging._db_errors import LOCK_NOT_AVAILABLE, READ_ONLY_SQL_TRANSACTION, sqlstate_of
from reliable_messaging._declarations import (
    CONTEXT_NAME,
    DECLARATION_FILE,
    EVENT_TYPE,
    RESERVED_NAMES,
    ContextDeclaration,
    DeclarationError,
    command_owners,
    context_of,
    hosted,
    installed,
    known_packages,
    names,
    parse_contexts,
    read_declarations,
    schema_folder,
)
from reliable_messaging._ids import new_event_id
from reliable_messaging._json_depth import nested_deeper_than
from reliable_messaging._masking import mask_sensitive, mask_text
from reliable_messaging._session_timeouts import apply_session_timeouts
from reliable_messaging._telemetry import current as span_in_use
from reliable_messaging._telemetry import enable as enable_tracing
from reliable_messaging._telemetry import ids_of as trace_ids
from reliable_messaging._telemetry import server_span, trace_headers
from reliable_messaging._topology import ANY_EVENT, consumers, queue_bindings, subscribers_of

if TYPE_CHECKING:
    from kombu import Connection


def declare_queues() -> list[str]:
    """Declare this deployment's exchange and queues on the broker now, before it takes traffic;
    the names of the queues declared. ``ConnectionError`` when the broker cannot be reached."""
    from reliable_messaging import _broker as broker  # the broker's module reads the registry: after Django's set-up

    return broker.declare_queues()


def unbind_queue(consumer: str, routing_keys: Iterable[str]) -> bool:
    """Stop routing events to a consumer no deployment runs any more (``broker.unbind_queue``)."""
    from reliable_messaging import _broker as broker

    return broker.unbind_queue(consumer, routing_keys)


def broker_connection() -> "Connection":
    """A new, not yet connected, kombu connection to the bus's broker, opened as its workers open
    theirs (``BROKER_URL``'s nodes in turn, or the embedded broker's folders)."""
    from reliable_messaging import _broker as broker

    return broker.connect()


__all__ = [
    # Telemetry: the composition root enables tracing and opens the web request's span.
    "enable_tracing",
    "server_span",
    "span_in_use",
    "trace_headers",
    "trace_ids",
    # Declarations: the settings read the contexts' context.toml before the apps load; manage.py,
    # the URLs and the deployment commands ask which contexts are installed, hosted and own what.
    "DECLARATION_FILE",
    "ContextDeclaration",
    "DeclarationError",
    "command_owners",
    "context_of",
    "hosted",
    "installed",
    "known_packages",
    "names",
    "parse_contexts",
    "read_declarations",
    "schema_folder",
    # startcontext checks a new context's names as the declarations will.
    "CONTEXT_NAME",
    "EVENT_TYPE",
    "RESERVED_NAMES",
    # Topology and names: what the host's tooling binds, purges or looks at on the broker.
    "ANY_EVENT",
    "consumers",
    "exchange_name",
    "queue_bindings",
    "queue_name",
    "subscribers_of",
    # The broker: a deployment declares its queues before it takes traffic.
    "broker_connection",
    "declare_queues",
    "unbind_queue",
    # PostgreSQL: the web process keeps the workers' session limits and maps the same SQLSTATEs.
    "LOCK_NOT_AVAILABLE",
    "READ_ONLY_SQL_TRANSACTION",
    "apply_session_timeouts",
    "sqlstate_of",
    # The host's edges check and mask as the bus does: its JSON parser, its log lines.
    "mask_sensitive",
    "mask_text",
    "nested_deeper_than",
    # The ids the bus gives events, for a process that writes outbox rows without Django (a load).
    "new_event_id",
]
