"""Serve a long-running command's own Prometheus registry on a port of its own."""

import logging

from prometheus_client import start_http_server

logger = logging.getLogger(__name__)


def serve_metrics(port: int | None) -> None:
    if port:
        start_http_server(port, addr="127.0.0.1")
        logger.info("serving metrics", extra={"url": f"http://127.0.0.1:{port}/metrics"})
