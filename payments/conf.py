"""Payments' settings, each with its default here: a deployment of payments alone sets only what it
changes (config/settings.py reads them from the environment). Read at the moment of use."""

from django.conf import settings

DEFAULTS = {
    "GATEWAY_TIMEOUT": 10.0,  # seconds: a whole call, connect to last byte
    "GATEWAY_CONCURRENCY": 128,  # calls in the air at once per gateway worker
    "GATEWAY_CHARGE_ATTEMPTS": 8,  # a charge never answered is given up after these
    # the fake gateway (run_fake_gateway): its port, median latency (ms) and share of answers lost
    "GATEWAY_PORT": 8090,
    "FAKE_GATEWAY_LATENCY": 0.0,
    "FAKE_GATEWAY_TIMEOUT_RATE": 0.0,
}


def setting(name: str):
    if hasattr(settings, name):
        return getattr(settings, name)
    if name == "GATEWAY_URL":  # the card gateway: by default the fake one, on its port
        return f"http://127.0.0.1:{setting('GATEWAY_PORT')}"
    return DEFAULTS[name]
