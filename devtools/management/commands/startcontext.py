import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from reliable_messaging.hosting import installed

from devtools.scaffold import Request, ScaffoldError, check, files_of, install


def tidy(package: Path) -> None:
    """The project's own import order and format (ruff), where ruff is installed."""
    for args in (["check", "--fix", "--quiet", "--select", "I"], ["format", "--quiet"]):
        subprocess.run([sys.executable, "-m", "ruff", *args, str(package)], capture_output=True)


def keys(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))


class Command(BaseCommand):
    help = (
        "Scaffold a bounded context that follows the order saga (devtools/scaffold.py), install it "
        "(INSTALLED_CONTEXTS) and regenerate the import contracts, its first migration, the schema "
        "snapshot and docs/asyncapi.yaml (docs/adding-a-context.md)."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="lower_snake_case: the package, the consumer and the queue's name")
        parser.add_argument("--consumes", default="", help="routing keys, comma-separated: one handler each")
        parser.add_argument(
            "--publishes", default="", help="its event types, comma-separated: NAME.<aggregate>.<event>"
        )

    def handle(self, *args, name, consumes="", publishes="", **options):
        base_dir = Path(settings.BASE_DIR)
        request = Request(name=name, consumes=keys(consumes), publishes=keys(publishes))
        try:
            request = check(request, base_dir, installed())
        except ScaffoldError as exc:
            raise CommandError(str(exc)) from None
        for relative, content in files_of(request).items():
            path = base_dir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        install(base_dir / "config" / "settings.py", name)
        tidy(base_dir / name)
        self.stdout.write(f"{name}/: the package, installed in config/settings.py (INSTALLED_CONTEXTS)")
        # Each in a process of its own: this one read the settings before the context was installed.
        self.manage("makemigrations", name)
        self.manage("import_contracts", "--write")
        self.manage("event_schemas", "--snapshot", orchestrator=True)
        asyncapi = self.manage("asyncapi", orchestrator=True, quiet=True)
        (base_dir / "docs" / "asyncapi.yaml").write_text(asyncapi)
        self.stdout.write("docs/asyncapi.yaml: regenerated")
        self.stdout.write(
            f"Next: write {name}'s services and handlers, then run its tests: "
            f"scripts/with_test_services.py .venv/bin/pytest {name}/tests (docs/adding-a-context.md)"
        )

    def manage(self, *args: str, orchestrator: bool = False, quiet: bool = False) -> str:
        """``manage.py <args>`` with every context of the tree installed (the orchestrator's too, as
        make test's schema check reads them), hosting them all; its output, or CommandError."""
        env = {k: v for k, v in os.environ.items() if k != "CONTEXTS"}
        env["DEBUG"] = "1"
        if orchestrator:
            env["ORCHESTRATOR"] = "1"
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise CommandError(f"manage.py {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        if not quiet:
            self.stdout.write(done.stdout.rstrip())
        return done.stdout
