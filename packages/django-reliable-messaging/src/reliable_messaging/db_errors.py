"""What a database error Django wrapped says: its SQLSTATE, and the codes the bus acts on."""

LOCK_NOT_AVAILABLE = "55P03"
READ_ONLY_SQL_TRANSACTION = "25006"


def sqlstate_of(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error Django wrapped, if the server sent one."""
    return getattr(exc.__cause__, "sqlstate", None) or getattr(exc, "sqlstate", None)
