"""What ``manage.py`` adds to Django's command line for this project's deployments."""

import signal
import sys

from django.conf import settings
from reliable_messaging.hosting import command_owners


def refuse_commands_of_other_contexts(argv: list[str]) -> None:
    """A command of a context this deployment does not host (its package may not even be in the
    tree) exits 2 saying where it lives, instead of Django's "Unknown command"."""
    command = argv[1] if len(argv) > 1 else ""
    owner = command_owners().get(command)
    if owner and owner not in settings.CONTEXTS:
        sys.stderr.write(
            f"{command} belongs to the {owner} context, which this deployment does not host "
            f"(CONTEXTS={','.join(settings.CONTEXTS)}). Run it in a deployment with {owner}.\n"
        )
        raise SystemExit(2)


def runserver_stops_on_sigterm(argv: list[str]) -> None:
    """``runserver`` exits 0 on Ctrl-C (KeyboardInterrupt) but dies of SIGTERM, the signal process
    managers (honcho, ``make run``) stop it with: make the two the same."""
    if len(argv) > 1 and argv[1] == "runserver":
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum, frame):
    raise KeyboardInterrupt
