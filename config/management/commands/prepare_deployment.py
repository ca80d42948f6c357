from django.core.management import call_command
from django.core.management.base import BaseCommand

from kernel.contexts import hosted


class Command(BaseCommand):
    help = (
        "Make this deployment ready to start: migrate the default database and every one its contexts "
        "declare (databases), then run their setup commands (setup; e.g. seed_catalog). Safe to run again."
    )

    def handle(self, *args, **options):
        declarations = hosted()
        for database in dict.fromkeys(["default", *(db for d in declarations for db in d.databases)]):
            call_command("migrate", database=database, interactive=False, verbosity=0)
        for declaration in declarations:
            for command in declaration.setup:
                call_command(*command, stdout=self.stdout, stderr=self.stderr)
