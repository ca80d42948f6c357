"""PostgreSQL session limits, set when a connection opens (libpq ``options``, ``-c name=value``).

A process that hangs in the middle of a transaction (a dependency that never answers) must not
hold its row locks, or wait for someone else's, without bound: ``lock_timeout`` bounds a wait
for a lock, ``statement_timeout`` a statement, ``idle_in_transaction_session_timeout`` the time
between two statements of an open transaction (PostgreSQL then ends the session, releasing its
locks). Values are seconds; 0 sets nothing, so the server's (or the role's) own setting
applies, and with every limit at 0 no ``options`` are sent at all (PgBouncer refuses them
unless told to ignore them).
"""

from django.db import connections


def options_with_timeouts(options: str, timeouts: dict[str, float]) -> str:
    """libpq ``options`` with ``-c name=<ms>`` appended for each limit (after any given ones)."""
    limits = " ".join(f"-c {name}={round(seconds * 1000)}" for name, seconds in sorted(timeouts.items()) if seconds > 0)
    return f"{options} {limits}".strip()


def apply_session_timeouts(timeouts: dict[str, float]) -> None:
    """Every PostgreSQL connection this process opens from now on starts with these limits.

    Call it before the first query of the process (a pool copies its settings when created).
    """
    for alias in connections:
        config = connections.settings[alias]
        # By vendor, not engine name: a project's own engine built on Django's PostgreSQL one counts too.
        if connections[alias].vendor == "postgresql" and any(seconds > 0 for seconds in timeouts.values()):
            opts = config.setdefault("OPTIONS", {})
            opts["options"] = options_with_timeouts(opts.get("options", ""), timeouts)
