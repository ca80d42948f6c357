"""gunicorn settings for production: ``gunicorn config.wsgi -c service_platform/gunicorn.conf.py`` (the
monolith), ``gunicorn service_platform.wsgi -c service_platform/gunicorn.conf.py`` in a service (its Procfile).

Every value can be overridden on the command line or with GUNICORN_CMD_ARGS.
See docs/operations.md for the reasoning.
"""

import multiprocessing
import os

from service_platform import gunicorn_errors

# The requests gunicorn refuses itself get the API's JSON error shape, not an HTML page.
gunicorn_errors.install()

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
# Sync workers, one per core: a request is short and mostly waits on PostgreSQL; more
# workers than cores lowered throughput on the 2-core reference machine.
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count()))
worker_class = "sync"
timeout = 30
graceful_timeout = 30
# Recycle workers now and then (a slow leak cannot grow forever); jitter avoids all at once.
max_requests = 5000
max_requests_jitter = 500
accesslog = "-"
# gunicorn 27's control socket defaults to one path per user (~/.gunicorn/gunicorn.ctl):
# two servers of one user would fight over it. Off; enable it with --control-socket PATH.
control_socket_disable = True
forwarded_allow_ips = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1")


def child_exit(server, worker):
    """Multiprocess metrics: forget a dead worker's live gauges (prometheus_client)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
