"""``make service CONTEXT=<name> OUT=<dir>`` (scripts/build_service.py): a context's tree holds its own code,
the platform's and, of the other contexts, their declarations and schemas only; no test, no development
tooling, a requirements file with no test tool, pinned as the repository pins it; installed from that
file alone, it runs apart. (An order through the four built services: tests/e2e/test_deployments.py.)"""

import importlib.metadata
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from reliable_messaging.hosting import installed

from faultlib.processes import BASE_DIR
from tests.support.split import make_tree

SAGA = ["orders", "payments", "inventory", "shipping"]
TEST_TOOLS = {"pytest", "pytest-django", "pytest-timeout", "hypothesis", "schemathesis", "selenium", "nox", "uv"}
DEVELOPMENT = {"import-linter", "ruff", *TEST_TOOLS}
PLATFORM = {
    "service_platform",
    "kernel",
    "operations",
    "wheels",
    "manage.py",
    "service_settings.py",
    "Procfile",
    "requirements.txt",
}


@pytest.fixture(scope="module")
def trees():
    return {context: make_tree(context) for context in SAGA if context in {d.name for d in installed()}}


def files(tree: Path) -> set[str]:
    """Every file of the tree but its virtual environment and what installing it wrote."""
    return {
        str(path.relative_to(tree))
        for path in tree.rglob("*")
        if path.is_file()
        and not {".venv", "var", "__pycache__"} & set(path.relative_to(tree).parts)
        and ".egg-info" not in str(path)
    }


def test_a_service_holds_its_context_the_platform_and_of_the_others_their_declarations_only(trees):
    contexts = {path.parent.name for path in BASE_DIR.glob("*/context.toml")}
    for context, tree in trees.items():
        shipped = files(tree)
        top = {name.split("/")[0] for name in shipped}
        assert top == PLATFORM | contexts, context
        assert not [f for f in shipped if "/tests/" in f or f.startswith(("tests/", "docs/"))], context
        for other in contexts - {context}:
            theirs = {f.split("/", 1)[1] for f in shipped if f.startswith(f"{other}/")}
            # data: the topology and the events' contracts (a producer's upcasters travel with its schemas)
            assert theirs == {"context.toml"} | {
                str(p.relative_to(BASE_DIR / other)) for p in (BASE_DIR / other / "schemas").iterdir() if p.is_file()
            }, (context, other)
        # its own package, the platform, the kernel and the operator's views: as in the repository, without tests
        for package in (context, "service_platform", "kernel", "operations"):
            theirs = {f for f in shipped if f.startswith(f"{package}/")}
            assert theirs == production_files(package), (context, package)
        # neither the monolith's composition root nor its development tooling (the scaffolder, the contracts)
        assert not {"config", "devtools", "fake_gateway"} & top
        assert "scaffold.py" not in {Path(f).name for f in shipped} and "import_contracts.py" not in {
            Path(f).name for f in shipped
        }


def production_files(package: str) -> set[str]:
    """The repository's files of ``package`` that a service ships: all but its tests and what Python wrote."""
    shipped = {name for name in files(BASE_DIR / package) if not {"tests", "build"} & set(name.split("/"))}
    return {f"{package}/{name}" for name in shipped if not name.endswith(".pyc")}


def test_its_requirements_pin_the_repositorys_versions_and_hold_no_development_tool(trees):
    for context, tree in trees.items():
        lines = [line for line in (tree / "requirements.txt").read_text().splitlines() if not line.startswith("#")]
        wheel = (tree / "wheels").glob("django_reliable_messaging-*.whl")
        assert lines[:5] == [
            f"./wheels/{next(wheel).name}[crypto,fast,metrics,otel]",
            "-e ./service_platform",
            "-e ./kernel",
            "-e ./operations",
            f"-e ./{context}",
        ]
        pins = {Requirement(line).name: str(Requirement(line).specifier) for line in lines[5:]}
        assert not {name.lower() for name in pins} & DEVELOPMENT, context
        # the versions make install installed from the root requirements.txt
        assert {name: spec for name, spec in pins.items() if spec != f"=={importlib.metadata.version(name)}"} == {}


def test_its_procfile_runs_the_web_tier_relay_consumers_and_its_own_processes(trees):
    web = (
        "web: exec gunicorn service_platform.wsgi -c service_platform/gunicorn.conf.py "
        "--env DJANGO_SETTINGS_MODULE=service_settings"
    )
    common = [web, "relay: exec python manage.py run_outbox_relay", "consumers: exec python manage.py run_consumers"]
    own = {
        "orders": ["deadline: exec python manage.py expire_pending_orders --loop"],
        # not the fake gateway its declaration runs beside it in development: no code of the service's
        "payments": ["gateway-calls: exec python manage.py run_gateway_calls"],
        "inventory": [],
        "shipping": [],
    }
    for context, tree in trees.items():
        lines = [line for line in (tree / "Procfile").read_text().splitlines() if not line.startswith("#")]
        assert lines == common + own[context], context


def test_installed_from_its_own_requirements_it_checks_alone_and_imports_no_other_context(trees):
    tree = trees["payments"]
    python = str(tree / ".venv" / "bin" / "python")
    probe = (
        "import importlib.util as u\n"
        "print([m for m in ('orders.apps', 'inventory.apps', 'fake_gateway', 'faultlib', 'pytest', "
        "'config', 'devtools', 'payments.apps') "
        "if u.find_spec(m.split('.')[0]) and u.find_spec(m)])"
    )
    env = {"PATH": "/usr/bin:/bin", "DEBUG": "1", "VAR_DIR": str(tree / "var")}
    found = subprocess.run([python, "-c", probe], cwd=tree, env=env, capture_output=True, text=True)
    assert found.stdout.strip() == "['payments.apps']", found.stderr
    checked = subprocess.run([python, "manage.py", "check"], cwd=tree, env=env, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == "System check identified no issues (0 silenced).\n"
    # The saga admin's Mermaid: a static file of the kernel as installed there, which collectstatic collects.
    found = subprocess.run(
        [python, "manage.py", "findstatic", "kernel/mermaid/mermaid.min.js", "-v0"],
        cwd=tree, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert found.stdout.strip() == str((tree / "kernel/static/kernel/mermaid/mermaid.min.js").resolve()), found.stderr
