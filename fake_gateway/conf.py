"""The fake gateway's settings, each with its default here (config/settings.py reads them from the
environment). Read at the moment of use."""

from django.conf import settings

# Its ledger's database alias: a connection of its own, so that no caller's transaction holds it.
DATABASE = "gateway"

DEFAULTS = {
    "GATEWAY_PORT": 8090,  # where run_fake_gateway listens
    "FAKE_GATEWAY_LATENCY": 0.0,  # the median answer time (ms; lognormal, p99 about 6x the median)
    "FAKE_GATEWAY_TIMEOUT_RATE": 0.0,  # the share of operations done but never answered
}


def setting(name: str):
    return getattr(settings, name, DEFAULTS[name])
