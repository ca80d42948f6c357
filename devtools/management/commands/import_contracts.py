from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from devtools.import_contracts import contract_contexts, current, render, write


class Command(BaseCommand):
    help = (
        "Print the import contracts generated from the installed contexts (devtools/import_contracts.py); "
        "--write puts them in pyproject.toml, --check fails when pyproject.toml differs."
    )

    def add_arguments(self, parser):
        parser.add_argument("--write", action="store_true")
        parser.add_argument("--check", action="store_true")

    def handle(self, *args, check=False, **options):
        base_dir = Path(settings.BASE_DIR)
        section = render(contract_contexts(base_dir, list(settings.INSTALLED_CONTEXTS)))
        pyproject = base_dir / "pyproject.toml"
        if options.get("write"):
            changed = write(pyproject, section)
            self.stdout.write("pyproject.toml: import contracts " + ("written" if changed else "unchanged"))
        elif check:
            if current(pyproject) != section:
                raise CommandError(
                    "pyproject.toml's import contracts are not those of the installed contexts: "
                    "run `DEBUG=1 .venv/bin/python manage.py import_contracts --write`"
                )
        else:
            self.stdout.write(section, ending="")
