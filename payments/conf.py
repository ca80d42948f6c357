"""Payments' settings, each with its default here: a deployment of payments alone sets only what it
changes (config/settings.py reads them from the environment). Read at the moment of use."""

from django.conf import settings

DEFAULTS = {
    "GATEWAY_TIMEOUT": 10.0,  # seconds: a whole call, connect to last byte
    "GATEWAY_CONCURRENCY": 128,  # calls in the air at once per gateway worker
    "GATEWAY_CHARGE_ATTEMPTS": 8,  # a charge never answered is given up after these
    "GATEWAY_PORT": 8090,  # the card gateway's port on this machine, when GATEWAY_URL is not set
}


def setting(name: str):
    if hasattr(settings, name):
        return getattr(settings, name)
    if name == "GATEWAY_URL":  # the card gateway: by default one on this machine, on its port
        return f"http://127.0.0.1:{setting('GATEWAY_PORT')}"
    return DEFAULTS[name]
