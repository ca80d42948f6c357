"""The bus's settings: one dict, ``settings.MESSAGING``; a key left out takes its default here.

Read at the moment of use (not cached), so ``override_settings(MESSAGING=...)`` works in tests.
Every key is documented in the package's README ("Settings"); ``settings_errors`` is what the app
refuses to start with.
"""

from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

DEFAULTS: dict[str, Any] = {
    # the broker: kombu URLs, ";"-separated for a cluster's nodes; "filesystem://" is the embedded one
    "BROKER_URL": "filesystem://",
    "BROKER_HEARTBEAT": 30,
    "FILESYSTEM_DIR": "var/broker",
    "EXCHANGE": "events",
    # the title of the AsyncAPI document (``manage.py asyncapi``)
    "ASYNCAPI_TITLE": "Events",
    # the declared packages (each with a context.toml), the folder they are in, and the names of
    # the contexts this deployment hosts (None: every declared one)
    "DECLARED_CONTEXTS": (),
    # the kinds an event may be declared with in [publishes] (empty: any text), and the host's own
    # keys of context.toml: key -> its default (a value of another type is refused)
    "EVENT_KINDS": (),
    "DECLARATION_KEYS": {},
    "CONTEXTS_DIR": ".",
    "CONTEXTS": None,
    # where `event_schemas --snapshot` writes the frozen schemas, and a shared folder of the
    # schemas of events consumed from producers this tree does not declare
    "SCHEMA_SNAPSHOT_DIR": "docs/schemas-snapshot",
    "EVENT_SCHEMAS_DIR": "",
    # the format "system-currency" of a JSON Schema accepts this value only
    "CURRENCY": "USD",
    # producer name -> its broker user (BROKER_PRODUCERS), this deployment's own broker user
    "PRODUCERS": {},
    "BROKER_USER": "",
    "RELAY_BATCH_SIZE": 500,
    "RELAY_PIPELINES": 1,
    "RELAY_POLL_INTERVAL": 1.0,
    "RELAY_CONFIRM_TIMEOUT": 15.0,
    "RELAY_MAX_ATTEMPTS": 10,
    "CONSUMER_BATCH_SIZE": 1,
    "CONSUMER_PREFETCH": 20,
    "CONSUMER_RETRY_DELAYS": [1.0, 5.0, 30.0],
    "CONSUMER_MAX_ATTEMPTS": 5,
    "DELIVERY_LIMIT": 20,
    # the largest message body a consumer takes (bytes): a larger one is a dead letter at once,
    # never assembled, decoded or parsed (``reliable_messaging._amqp_properties``)
    "MAX_MESSAGE_BYTES": 1024 * 1024,
    "SENSITIVE_FIELDS": [],
    "EVENT_VERSIONS": "",
    # a timedelta, or a number of seconds
    "OUTBOX_RETENTION": timedelta(days=7),
    "INBOX_RETENTION": timedelta(days=14),
    "EVENT_LOG_RETENTION": timedelta(days=90),
    # a dead letter waiting since it last failed; one replayed, since its replay (its message lives on)
    "DEAD_LETTER_RETENTION": timedelta(days=30),
    "REPLAYED_DEAD_LETTER_RETENTION": timedelta(days=7),
    # how often the relay purges by the retentions (None: never; a cron runs purge_messages)
    "HOUSEKEEPING_INTERVAL": timedelta(minutes=10),
    # the command a worker names when it refuses a database its apps' migrations are missing from
    "SETUP_COMMAND": "migrate",
    # PostgreSQL session limits (seconds) of the relay's and consumers' connections
    "WORKER_DATABASE_TIMEOUTS": {},
    # context name -> the DATABASE_URL of the deployment that hosts it (the commands an operator
    # is told to run there, for a dead letter of another deployment)
    "DEPLOYMENT_DATABASE_URLS": {},
}


# The longest wait a retry or a breaker's cool-down may have: a wait header further ahead is no
# retry of the bus's and is not honoured (reliable_messaging._broker.waiting_until).
MAX_WAIT_SECONDS = 86400.0


def setting(name: str) -> Any:  # whatever the host's settings hold: the callers check what they need
    if name not in DEFAULTS:
        raise KeyError(f"MESSAGING has no setting {name!r}")
    return getattr(settings, "MESSAGING", {}).get(name, DEFAULTS[name])


def exchange_name() -> str:
    name: str = setting("EXCHANGE")
    return name


def queue_name(consumer: str) -> str:
    return f"{consumer}_queue"


def contexts_dir() -> Path:
    return folder("CONTEXTS_DIR")


RETENTIONS = (
    "OUTBOX_RETENTION",
    "INBOX_RETENTION",
    "EVENT_LOG_RETENTION",
    "DEAD_LETTER_RETENTION",
    "REPLAYED_DEAD_LETTER_RETENTION",
)


def duration(name: str) -> timedelta:
    """A duration setting: a ``timedelta``, or a number of seconds."""
    value = setting(name)
    if isinstance(value, timedelta) and value > timedelta(0):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return timedelta(seconds=value)
    raise ImproperlyConfigured(
        f"MESSAGING[{name!r}] is {value!r}: give a positive timedelta or a number of seconds "
        f"(14 days: timedelta(days=14) or {14 * 86400})"
    )


def folder(name: str) -> Path:
    """A folder setting: a ``str`` or a ``Path`` (relative: to the working directory)."""
    value = setting(name)
    if not isinstance(value, str | Path) or not str(value):
        raise ImproperlyConfigured(f"MESSAGING[{name!r}] is {value!r}: give a folder, as a str or a Path")
    return Path(value)


def max_message_bytes() -> int:
    """``MAX_MESSAGE_BYTES``: a positive number of bytes."""
    value = setting("MAX_MESSAGE_BYTES")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise ImproperlyConfigured(
        f"MESSAGING['MAX_MESSAGE_BYTES'] is {value!r}: give a positive number of bytes (1 MiB: {1024 * 1024})"
    )


def check_settings() -> None:
    """At start-up: every setting whose type the bus cannot guess is one it can use."""
    if unknown := sorted(set(getattr(settings, "MESSAGING", {})) - set(DEFAULTS)):
        raise ImproperlyConfigured(f"MESSAGING has no setting {', '.join(map(repr, unknown))}")
    for name in RETENTIONS:
        duration(name)
    if setting("HOUSEKEEPING_INTERVAL") is not None:
        duration("HOUSEKEEPING_INTERVAL")
    folder("FILESYSTEM_DIR")
    max_message_bytes()
    delays = setting("CONSUMER_RETRY_DELAYS")
    if not (
        isinstance(delays, list | tuple)
        and delays
        and all(isinstance(d, int | float) and not isinstance(d, bool) and 0 < d <= MAX_WAIT_SECONDS for d in delays)
    ):
        raise ImproperlyConfigured(
            f"MESSAGING['CONSUMER_RETRY_DELAYS'] is {delays!r}: give a list of seconds, each more than 0 and at most "
            f"{MAX_WAIT_SECONDS:.0f} (the waits before the 2nd, 3rd, ... attempt; the last repeats)"
        )
