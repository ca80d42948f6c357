"""Payments' settings, each with its default here: a deployment of payments alone sets only what it
changes (service_platform/settings.py reads them from the environment). Read at the moment of use."""

from django.conf import settings

DEFAULTS = {
    # Seconds: a whole call, connect to last byte; a later answer is a timeout (retried with its key).
    "GATEWAY_TIMEOUT": 10.0,
    # Calls in the air at once per payments process: the HTTP client's pool and the worker's threads.
    "GATEWAY_CONCURRENCY": 128,
    # The gateway worker (run_gateway_calls) makes each call outside any transaction; a charge still
    # unanswered after this many attempts (backoff 0.5 s doubling to 30 s) is given up once the
    # gateway says it holds nothing under its key: the order fails (decline code processing_error).
    "GATEWAY_CHARGE_ATTEMPTS": 8,
    "GATEWAY_PORT": 8090,  # the card gateway's port on this machine, when GATEWAY_URL is not set
}


def setting(name: str):
    if hasattr(settings, name):
        return getattr(settings, name)
    if name == "GATEWAY_URL":  # the card gateway: by default one on this machine, on its port
        return f"http://127.0.0.1:{setting('GATEWAY_PORT')}"
    return DEFAULTS[name]
