from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from reliable_messaging.hosting import DECLARATION_FILE, declare_queues, hosted, read_declarations, unbind_queue


class Command(BaseCommand):
    help = (
        "Make this deployment ready to start: migrate the default database and every one its contexts "
        "declare (databases), run their setup commands (setup; e.g. seed_catalog), then declare its queues "
        "and their bindings on the broker, so that it receives every event published from now on, before "
        "any of its processes runs; with the orchestrator off, unbind its queue. Safe to run again."
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
            retired = self.unbind_the_orchestrator()
        except ConnectionError as exc:
            raise CommandError(f"the broker (BROKER_URL) could not be reached to declare the queues: {exc}") from None
        self.stdout.write(f"queues declared: {', '.join(declared)}")
        if retired:
            self.stdout.write(
                f"{retired}_queue unbound: the orchestrator is off (ORCHESTRATOR); what the queue holds stays "
                "for an operator to read or purge"
            )

    @staticmethod
    def unbind_the_orchestrator() -> str | None:
        """Switched off after it ran, the orchestrator's queue would stay bound and grow for ever
        (four messages an order, no consumer). The same in every deployment, so any may unbind it."""
        base_dir = Path(settings.BASE_DIR)
        if settings.ORCHESTRATOR or not (base_dir / "orchestrator" / DECLARATION_FILE).exists():
            return None
        [orchestrator] = read_declarations(base_dir, ("orchestrator",))
        return orchestrator.name if unbind_queue(orchestrator.name, orchestrator.consumes) else None
