#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    from config.cli import refuse_commands_of_other_contexts, runserver_stops_on_sigterm

    refuse_commands_of_other_contexts(sys.argv)
    runserver_stops_on_sigterm(sys.argv)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
