"""The orchestrator's settings, each with its default here: a deployment of it alone sets only what
it changes (service_platform/settings.py reads them from the environment). Read at the moment of use."""

from django.conf import settings

DEFAULTS = {
    "ORCHESTRATOR_STEP_TIMEOUT": 95.0,  # seconds a step waits for its reply before it is sent again
    "ORCHESTRATOR_STEP_ATTEMPTS": 3,  # sends of a step before it is given up and compensated
    "SAGA_TIMEOUT": 300.0,  # orders' own deadline, which its give-up must come before
}


def setting(name: str):
    return getattr(settings, name, DEFAULTS[name])
