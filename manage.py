#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line
    from reliable_messaging.hosting import DeclarationError

    from service_platform.cli import refuse_commands_of_other_contexts, runserver_stops_on_sigterm

    # A configuration error in one line, not a traceback: the settings, the contexts' declarations,
    # and what the apps check as they load (the event contracts and the EVENT_VERSIONS pins).
    try:
        from django.conf import settings

        settings.CONTEXTS  # noqa: B018 - loads the settings
        django.setup()  # Django's command line sets up again: a no-op once done
    except (ImproperlyConfigured, DeclarationError) as exc:
        sys.exit(f"Configuration error: {exc}")

    refuse_commands_of_other_contexts(sys.argv)
    runserver_stops_on_sigterm(sys.argv)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
