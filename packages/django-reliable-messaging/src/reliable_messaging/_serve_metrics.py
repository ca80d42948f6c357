"""Serve a long-running command's own Prometheus registry on a port of its own."""

import errno
import logging

from django.core.management.base import CommandError

logger = logging.getLogger("reliable_messaging.serve_metrics")


def serve_metrics(port: int | None, *, variable: str) -> None:
    """Serve on 127.0.0.1:``port``. A port already taken stops the command with one line naming
    the port and ``variable``, the setting `make run` takes it from."""
    if not port:
        return
    try:
        from prometheus_client import start_http_server
    except ImportError:
        raise CommandError(
            f"metrics on port {port} need prometheus_client: pip install 'django-reliable-messaging[metrics]'"
        ) from None
    try:
        start_http_server(port, addr="127.0.0.1")
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise CommandError(
            f"metrics port {port} is already in use on 127.0.0.1: set {variable} (make run) "
            "or --metrics-port to a free port, or stop what listens there"
        ) from None
    logger.info("serving metrics", extra={"url": f"http://127.0.0.1:{port}/metrics"})
