"""What a database error Django wrapped says: its SQLSTATE, and the codes the bus acts on."""

DEADLOCK_DETECTED = "40P01"
# A wait bounded by the session's limits ran out (reliable_messaging._session_timeouts): a holder is stuck.
LOCK_NOT_AVAILABLE = "55P03"
QUERY_CANCELED = "57014"
READ_ONLY_SQL_TRANSACTION = "25006"


def sqlstate_of(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error Django wrapped, if the server sent one."""
    return getattr(exc.__cause__, "sqlstate", None) or getattr(exc, "sqlstate", None)
