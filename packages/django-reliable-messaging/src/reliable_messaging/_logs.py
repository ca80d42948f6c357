"""The workers' log lines where the host configures none: a project with no ``LOGGING`` of its own
(Django's default sends nothing of ``reliable_messaging`` anywhere) still sees each worker's start
line and one line per message, on stderr, with the fields the bus logs them with."""

import logging

import structlog

# What every LogRecord has: the rest of its attributes came in ``extra=``.
_RECORD_FIELDS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
# manage.py's -v: 0 warnings only, 1 (the default) INFO, 2 and 3 DEBUG.
_LEVELS = {0: logging.WARNING, 1: logging.INFO}
# Which message a line is about first, then the rest in the order they were given.
_FIRST = {"consumer": 0, "event_type": 1, "message_id": 2, "correlation_id": 3}


class FieldsFormatter(logging.Formatter):
    """The message, then ``key=value`` for its ``extra`` fields and the bound context (the message
    being handled: consumer, message id, event type, correlation id)."""

    def format(self, record: logging.LogRecord) -> str:
        given = {key: value for key, value in vars(record).items() if key not in _RECORD_FIELDS}
        fields = {**structlog.contextvars.get_contextvars(), **given}
        shown = sorted((key for key, value in fields.items() if value not in ("-", None)), key=_place)
        return " ".join([super().format(record), *(f"{key}={fields[key]}" for key in shown)])


def _place(key: str) -> int:
    return _FIRST.get(key, len(_FIRST))


def log_to_stderr_unless_configured(verbosity: int = 1) -> None:
    """Give the bus's loggers a stderr handler, unless the host's logging already handles them."""
    bus = logging.getLogger("reliable_messaging")
    if bus.hasHandlers():
        return
    handler = logging.StreamHandler()
    handler.setFormatter(FieldsFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    bus.addHandler(handler)
    bus.setLevel(_LEVELS.get(verbosity, logging.DEBUG))
