"""``make service CONTEXT=<name> OUT=<dir>``: one context of this repository as a service of its own.

The tree is built from an allow-list, nothing else of the repository goes in:

- the context's package (its folder, without its tests), the platform every service runs on
  (``service_platform/``: the shared settings, URLs, the web tier, gunicorn, ``prepare_deployment``), the
  shared kernel and the operator's views (``kernel/``, ``operations/``): distributions of their own,
  installed editable from the tree. Nothing of the monolith's composition (``config/``) nor its
  development tooling (``devtools/``: the scaffolder, the import contracts' generator);
- the bus as the wheel built from ``packages/django-reliable-messaging``;
- of every other context of the repository, its declaration and its schemas only (data: the topology,
  the events it consumes and their producers' upcasters, which travel with their schemas);
- ``service_settings.py`` (the platform's settings, the repository's contexts installed, this one
  hosted alone), ``manage.py``, a
  ``Procfile`` (web, relay, consumers, and each process its declaration adds that its code runs) and
  ``requirements.txt``: what it imports, every version pinned as this repository pins it, no test tool.

Then, in the tree: ``pip install -r requirements.txt``, ``python manage.py prepare_deployment`` and
its Procfile's processes, with ``DATABASE_URL``, ``BROKER_URL``, ``SECRET_KEY`` and ``ALLOWED_HOSTS``
(and ``GATEWAY_URL`` for payments).

    python scripts/build_service.py CONTEXT OUT
"""

import argparse
import ast
import importlib.metadata
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from reliable_messaging.hosting import DECLARATION_FILE, ContextDeclaration, read_declarations

BASE_DIR = Path(__file__).resolve().parents[1]
BUS = BASE_DIR / "packages" / "django-reliable-messaging"
# What a service runs besides its context: distributions, installed editable from the tree.
SHARED = ("service_platform", "kernel", "operations")
NOT_SHIPPED = {"tests", "__pycache__", "build"}
# What runs the Procfile: the rest comes from the packages' pyproject.toml.
PROCESS_RUNNER = "honcho"


def declarations() -> dict[str, ContextDeclaration]:
    """Every context of this repository (a folder with a declaration), by name."""
    packages = tuple(sorted(path.parent.name for path in BASE_DIR.glob(f"*/{DECLARATION_FILE}")))
    return {declaration.name: declaration for declaration in read_declarations(BASE_DIR, packages)}


def installed_contexts() -> list[str]:
    """The monolith's INSTALLED_CONTEXTS (config/settings.py), as its one list reads: a service installs
    the same (the orchestrator joins where ORCHESTRATOR is on, as in the monolith)."""
    tree = ast.parse((BASE_DIR / "config" / "settings.py").read_text())
    [listed] = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["INSTALLED_CONTEXTS"]
    ]
    return ast.literal_eval(listed)


def ignore_for_shipping(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n in NOT_SHIPPED or n.endswith(".egg-info") or n.endswith(".pyc")}


def copy_package(name: str, out: Path) -> None:
    shutil.copytree(BASE_DIR / name, out / name, ignore=ignore_for_shipping)


def copy_declaration(declaration: ContextDeclaration, out: Path) -> None:
    folder = declaration.package
    (out / folder).mkdir()
    shutil.copy(BASE_DIR / folder / DECLARATION_FILE, out / folder / DECLARATION_FILE)
    if declaration.schemas:
        shutil.copytree(
            BASE_DIR / folder / declaration.schemas, out / folder / declaration.schemas, ignore=ignore_for_shipping
        )


def build_bus_wheel(out: Path) -> Path:
    wheels = out / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(BUS)],
        check=True,
    )
    [wheel] = wheels.glob("*.whl")
    return wheel


def pinned(roots: list[Requirement]) -> dict[str, str]:
    """Every distribution ``roots`` need, each at the version installed here (this repository's pins:
    make install installs requirements.txt), this repository's own left out: the bus is its wheel, and
    the contexts' and the kernel's needs are among the roots (the monolith does not install them)."""
    own = {canonicalize_name(f"saga-shop-{name}") for name in (*SHARED, *declarations())}
    pins: dict[str, str] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(r, "") for r in roots]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({**default_environment(), "extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        if (name, frozenset(requirement.extras)) in seen or name in own:  # own: its needs are among the roots
            continue
        seen.add((name, frozenset(requirement.extras)))
        distribution = importlib.metadata.distribution(name)
        if name != "django-reliable-messaging":  # the bus: its wheel
            pins[distribution.metadata["Name"]] = distribution.version
        for needed in distribution.requires or []:
            needed = Requirement(needed)
            todo += [(needed, "")] + [(needed, e) for e in requirement.extras]
    return dict(sorted(pins.items(), key=lambda pin: pin[0].lower()))


def dependencies_of(package: str) -> list[Requirement]:
    project = tomllib.loads((BASE_DIR / package / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"]]


def bus_extras() -> str:
    """The bus's extras the platform asks for (its pyproject.toml)."""
    [bus] = [r for r in dependencies_of("service_platform") if r.name == "django-reliable-messaging"]
    return ",".join(sorted(bus.extras))


def requirements(context: str, wheel: Path) -> str:
    roots = [Requirement(PROCESS_RUNNER)]
    for package in (*SHARED, context):
        roots += dependencies_of(package)
    lines = [
        f"# The {context} service's requirements (written by make service): pip install -r requirements.txt",
        "# The bus, built from its repository, with the extras the platform uses",
        f"./wheels/{wheel.name}[{bus_extras()}]",
        "# The context and what it runs on, each a distribution of its own (its pyproject.toml)",
        *(f"-e ./{package}" for package in (*SHARED, context)),
        "# Every distribution they need, pinned as the repository pins it",
        *(f"{name}=={version}" for name, version in pinned(roots).items()),
    ]
    return "\n".join(lines) + "\n"


def procfile(declaration: ContextDeclaration) -> str:
    """Web, relay, consumers (where it consumes anything), and each process its declaration adds
    whose command is its own (the fake card gateway's, run beside payments in development, is not)."""
    context = declaration.name
    commands = {path.stem for path in (BASE_DIR / declaration.package / "management" / "commands").glob("*.py")}
    processes = {
        "web": (
            "gunicorn service_platform.wsgi -c service_platform/gunicorn.conf.py "
            "--env DJANGO_SETTINGS_MODULE=service_settings"
        ),
        "relay": "python manage.py run_outbox_relay",
        **({"consumers": "python manage.py run_consumers"} if declaration.runs_consumer else {}),
        **{
            name: f"python manage.py {args}"
            for name, args in declaration.processes.items()
            if args.split()[0] in commands
        },
    }
    lines = [
        f"# The {context} service's processes (written by make service), after python manage.py prepare_deployment;",
        "# each reads DATABASE_URL, BROKER_URL, SECRET_KEY and ALLOWED_HOSTS (web listens on PORT).",
        *(f"{name}: exec {command}" for name, command in processes.items()),
    ]
    return "\n".join(lines) + "\n"


SETTINGS = '''"""The {context} service's settings (written by make service): the platform's
(service_platform/settings.py), the repository's contexts installed as it was built (this tree carries
the others' declarations and schemas), {context} hosted. The environment overrides each (.env.example)."""

import os

os.environ.setdefault("CONTEXTS", "{context}")

from service_platform.settings import *  # noqa: E402, F403
from service_platform.settings import hosting  # noqa: E402

INSTALLED_CONTEXTS = {installed!r}
globals().update(hosting(INSTALLED_CONTEXTS))
'''


def build(context: str, out: Path) -> Path:
    contexts = declarations()
    if context not in contexts:
        raise SystemExit(f"{context}: no such context here; choose among {', '.join(contexts)}")
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out}: not empty; name a new folder")
    out.mkdir(parents=True, exist_ok=True)
    for package in (context, *SHARED):
        copy_package(package, out)
    for name, declaration in contexts.items():
        if name != context:
            copy_declaration(declaration, out)
    wheel = build_bus_wheel(out)
    (out / "requirements.txt").write_text(requirements(context, wheel))
    (out / "Procfile").write_text(procfile(contexts[context]))
    installed = [name for name in installed_contexts() if name in contexts]
    (out / "service_settings.py").write_text(SETTINGS.format(context=context, installed=installed))
    manage = (BASE_DIR / "manage.py").read_text()
    (out / "manage.py").write_text(manage.replace('"config.settings"', '"service_settings"'))
    (out / "manage.py").chmod(0o755)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("context", help="the context's name (its folder)")
    parser.add_argument("out", type=Path, help="a new (or empty) folder")
    args = parser.parse_args()
    out = build(args.context, args.out.resolve())
    print(f"{out}: the {args.context} service; there: pip install -r requirements.txt, then prepare_deployment")
    return 0


if __name__ == "__main__":
    sys.exit(main())
