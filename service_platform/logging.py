"""Logging through the standard library, rendered by structlog as console lines or JSON.

Context bound with ``structlog.contextvars.bind_contextvars`` (the relay and consumers bind
``event_type``, ``message_id``, ``correlation_id`` and ``consumer``) is added to every line,
so one order can be followed with one grep. Payment tokens are masked in every line
(``mask_secrets``), whatever logged them.
"""

import logging.config

import structlog
from opentelemetry import trace

from kernel.logs import escape_control_characters


def mask_secrets(logger, method_name, event_dict):
    """Mask sensitive keys at any depth and ``payment_token=...`` inside any text."""
    from reliable_messaging.hosting import mask_sensitive, mask_text  # settings are loaded by the time we log

    masked = mask_sensitive(event_dict)
    return {key: mask_text(value) if isinstance(value, str) else value for key, value in masked.items()}


def drop_server_noise(logger, method_name, event_dict):
    """runserver's access lines carry its socket (``request=<socket.socket fd=...>``) and its own
    clock (``server_time``): the line already says the request and its timestamp."""
    if event_dict.get("logger") == "django.server":
        event_dict.pop("request", None)
        event_dict.pop("server_time", None)
    return event_dict


def add_trace_ids(logger, method_name, event_dict):
    """``trace_id`` and ``span_id`` of the current OpenTelemetry span, where none are bound."""
    if "trace_id" not in event_dict:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            event_dict["trace_id"] = f"{context.trace_id:032x}"
            event_dict["span_id"] = f"{context.span_id:016x}"
    return event_dict


def configure_logging(log_format: str, level: str) -> None:
    shared = [
        structlog.contextvars.merge_contextvars,
        add_trace_ids,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        drop_server_noise,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        # Tracebacks become text here, so that the masking below covers them too.
        structlog.processors.format_exc_info,
        mask_secrets,
    ]
    if log_format == "json":  # JSON escapes every control character itself
        rendering = [structlog.processors.JSONRenderer()]
    elif log_format == "console":  # a CR or LF in a logged value cannot forge a line of its own
        rendering = [escape_control_characters, structlog.dev.ConsoleRenderer(colors=False)]
    else:
        raise ValueError(f"LOG_FORMAT must be 'json' or 'console', not {log_format!r}")

    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "structured": {
                    "()": structlog.stdlib.ProcessorFormatter,
                    "processors": [structlog.stdlib.ProcessorFormatter.remove_processors_meta, *rendering],
                    "foreign_pre_chain": shared,
                }
            },
            "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "structured"}},
            "root": {"handlers": ["stderr"], "level": level},
            "loggers": {
                "django.db.backends": {"level": "WARNING"},
                "amqp": {"level": "WARNING"},
                "kombu": {"level": "WARNING"},
                # axes' INFO is a banner in every command and a line per login; its warnings (each
                # failure) stay, and service_platform.admin_lockout logs each lockout.
                "axes": {"level": "WARNING"},
            },
        }
    )
