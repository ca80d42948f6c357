"""Orders' settings, each with its default here: a deployment of orders alone sets only what it
changes (service_platform/settings.py reads them from the environment). Read at the moment of use."""

from django.conf import settings

DEFAULTS = {
    "SAGA_TIMEOUT": 300.0,  # seconds an order may stay PENDING before the deadline loop fails it
    "SAGA_STYLE": "choreography",  # or "orchestration": the saga an order placed now runs
    "IDEMPOTENCY_KEY_TTL": 86400.0,  # seconds a checkout's Idempotency-Key is remembered
    "IDEMPOTENCY_KEY_WAIT": 2.0,  # seconds a checkout waits for a concurrent one with its key
    "CURRENCY": "USD",
    "RETURN_STEP_TIMEOUT": 95.0,  # seconds a return's step waits for its reply before it is sent again
    "RETURN_STEP_ATTEMPTS": 3,  # sends of a return's forward step before it is given up and compensated
}


def setting(name: str):
    return getattr(settings, name, DEFAULTS[name])
