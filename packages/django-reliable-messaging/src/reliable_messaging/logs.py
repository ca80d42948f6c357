"""The workers' log lines where the host configures none: a project with no ``LOGGING`` of its own
(Django's default sends nothing of ``reliable_messaging`` anywhere) still sees each worker's start
line and one line per message, on stderr, with the fields the bus logs them with."""

import logging

import structlog

# What every LogRecord has: the rest of its attributes came in ``extra=``.
_RECORD_FIELDS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
# manage.py's -v: 0 warnings only, 1 (the default) INFO, 2 and 3 DEBUG.
_LEVELS = {0: logging.WARNING, 1: logging.INFO}


class FieldsFormatter(logging.Formatter):
    """The message, then ``key=value`` for its ``extra`` fields and the bound context (the message
    being handled: consumer, message id, event type, correlation id)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = {**structlog.contextvars.get_contextvars(), **{
            key: value for key, value in vars(record).items() if key not in _RECORD_FIELDS and not key.startswith("_")
        }}  # fmt: skip
        line = super().format(record)
        return " ".join([line, *(f"{key}={value}" for key, value in fields.items() if value not in ("-", None))])


def log_to_stderr_unless_configured(verbosity: int = 1) -> None:
    """Give the bus's loggers a stderr handler, unless the host's logging already handles them."""
    bus = logging.getLogger("reliable_messaging")
    if bus.hasHandlers():
        return
    handler = logging.StreamHandler()
    handler.setFormatter(FieldsFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    bus.addHandler(handler)
    bus.setLevel(_LEVELS.get(verbosity, logging.DEBUG))
