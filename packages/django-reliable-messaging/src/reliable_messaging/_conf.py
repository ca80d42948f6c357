"""The bus's settings: one dict, ``settings.MESSAGING``; a key left out takes its default here.

Read at the moment of use (not cached), so ``override_settings(MESSAGING=...)`` works in tests.
Every key is documented in the package's README ("Settings"); ``settings_errors`` is what the app
refuses to start with.
"""

from datetime import timedelta
from functools import cache
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
    # the claim check (reliable_messaging._claim_check): a payload over CLAIM_CHECK_BYTES (None: off)
    # travels apart, in the STORAGES alias CLAIM_CHECK_STORAGE (None: var/claim-check), up to
    # CLAIM_CHECK_MAX_BYTES; its message carries a reference
    "CLAIM_CHECK_BYTES": None,
    "CLAIM_CHECK_MAX_BYTES": 16 * 1024 * 1024,
    "CLAIM_CHECK_STORAGE": None,
    "SENSITIVE_FIELDS": [],
    # key id -> base64 of 32 random bytes, for the fields contexts declare [encrypted]: the last
    # listed encrypts, every listed one decrypts (reliable_messaging._field_crypto)
    "ENCRYPTION_KEYS": {},
    "EVENT_VERSIONS": "",
    # a timedelta, or a number of seconds
    "OUTBOX_RETENTION": timedelta(days=7),
    "INBOX_RETENTION": timedelta(days=14),
    "EVENT_LOG_RETENTION": timedelta(days=90),
    # a dead letter waiting since it last failed; one replayed, since its replay (its message lives on)
    "DEAD_LETTER_RETENTION": timedelta(days=30),
    "REPLAYED_DEAD_LETTER_RETENTION": timedelta(days=7),
    # per consumer and reason, the refusals of hostile input (not JSON, unknown event type, forged
    # producer, ...) stored in full per window; beyond, counted only (``_dead_letters``)
    "DEAD_LETTER_FLOOD_LIMIT": 100,
    "DEAD_LETTER_FLOOD_WINDOW": timedelta(hours=1),
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
    return _path(value)


@cache
def _path(value: str | Path) -> Path:
    """One ``Path`` per value: every event written looks up the declarations (a cache keyed by
    their folder) several times, and a new ``Path`` each time is parsed and hashed again."""
    return Path(value)


def max_message_bytes() -> int:
    """``MAX_MESSAGE_BYTES``: a positive number of bytes."""
    value = setting("MAX_MESSAGE_BYTES")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    raise ImproperlyConfigured(
        f"MESSAGING['MAX_MESSAGE_BYTES'] is {value!r}: give a positive number of bytes (1 MiB: {1024 * 1024})"
    )


def claim_check_limits() -> tuple[int | None, int]:
    """``CLAIM_CHECK_BYTES`` (None, or bytes up to MAX_MESSAGE_BYTES: what is not stored apart travels
    inline) and ``CLAIM_CHECK_MAX_BYTES`` (bytes, at least the first)."""
    threshold, largest = setting("CLAIM_CHECK_BYTES"), setting("CLAIM_CHECK_MAX_BYTES")
    if threshold is not None and not (
        isinstance(threshold, int) and not isinstance(threshold, bool) and 0 <= threshold <= max_message_bytes()
    ):
        raise ImproperlyConfigured(
            f"MESSAGING['CLAIM_CHECK_BYTES'] is {threshold!r}: give None (off) or a number of bytes up to "
            f"MAX_MESSAGE_BYTES ({max_message_bytes()}): a payload not stored apart travels inline"
        )
    if not (isinstance(largest, int) and not isinstance(largest, bool) and largest >= (threshold or 1)):
        raise ImproperlyConfigured(
            f"MESSAGING['CLAIM_CHECK_MAX_BYTES'] is {largest!r}: give a number of bytes, at least CLAIM_CHECK_BYTES"
        )
    alias = setting("CLAIM_CHECK_STORAGE")
    if alias is not None and alias not in getattr(settings, "STORAGES", {}):
        raise ImproperlyConfigured(
            f"MESSAGING['CLAIM_CHECK_STORAGE'] is {alias!r}, which STORAGES does not name: give one of its "
            "aliases, or None for a filesystem storage in var/claim-check"
        )
    return threshold, largest


def dead_letter_flood_limit() -> int:
    """``DEAD_LETTER_FLOOD_LIMIT``: a number of dead letters, 0 or more."""
    value = setting("DEAD_LETTER_FLOOD_LIMIT")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ImproperlyConfigured(
        f"MESSAGING['DEAD_LETTER_FLOOD_LIMIT'] is {value!r}: give the dead letters stored in full per consumer, "
        "reason and window (0 or more; 100 by default)"
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
    duration("DEAD_LETTER_FLOOD_WINDOW")
    dead_letter_flood_limit()
    claim_check_limits()
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
