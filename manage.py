#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    from config.cli import refuse_commands_of_other_contexts, runserver_stops_on_sigterm

    try:
        from django.conf import settings

        settings.CONTEXTS  # noqa: B018 - loads the settings: a configuration error in one line, not a traceback
    except ImproperlyConfigured as exc:
        sys.exit(f"Configuration error: {exc}")

    refuse_commands_of_other_contexts(sys.argv)
    runserver_stops_on_sigterm(sys.argv)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
