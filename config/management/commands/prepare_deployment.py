from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from reliable_messaging.hosting import declare_queues, hosted


class Command(BaseCommand):
    help = (
        "Make this deployment ready to start: migrate the default database and every one its contexts "
        "declare (databases), run their setup commands (setup; e.g. seed_catalog), then declare its queues "
        "and their bindings on the broker, so that it receives every event published from now on, before "
        "any of its processes runs. Safe to run again."
    )

    def handle(self, *args, **options):
        declarations = hosted()
        for database in dict.fromkeys(["default", *(db for d in declarations for db in d.databases)]):
            call_command("migrate", database=database, interactive=False, verbosity=0)
        for declaration in declarations:
            for command in declaration.setup:
                call_command(*command, stdout=self.stdout, stderr=self.stderr)
        try:
            declared = declare_queues()
        except ConnectionError as exc:
            raise CommandError(f"the broker (BROKER_URL) could not be reached to declare the queues: {exc}") from None
        self.stdout.write(f"queues declared: {', '.join(declared)}")
