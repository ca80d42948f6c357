"""Each context is a distribution of its own (``<context>/pyproject.toml``), as are the platform every
service runs, the shared kernel and the operator's views: it declares every distribution its code imports,
so a service built from it installs what it needs and nothing of the monolith's. ``startcontext`` writes
one for a new context that holds by the same rule."""

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from reliable_messaging.hosting import installed

from devtools.scaffold import Request, files_of

BASE_DIR = Path(__file__).resolve().parents[2]
# This project's own distributions, by the top-level package each holds.
OWN = {
    "service_platform": "saga-shop-service-platform",
    "kernel": "saga-shop-kernel",
    "operations": "saga-shop-operations",
    "reliable_messaging": "django-reliable-messaging",
}
DISTRIBUTIONS = sorted(path.parent.name for path in BASE_DIR.glob("*/pyproject.toml"))


def imported_distributions(package: str, sources: dict[str, str]) -> set[str]:
    """The distributions (canonical names) ``sources`` import, outside ``package`` and the standard library;
    of a namespace several distributions share (``opentelemetry``), the one that holds the module imported."""
    owners = importlib.metadata.packages_distributions()
    found = set()
    for text in sources.values():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in {package, *sys.stdlib_module_names}:
                    found.add(OWN.get(top) or owner_of(name, owners[top]))
    return {canonicalize_name(name) for name in found}


def owner_of(module: str, candidates: list[str]) -> str:
    """The distribution of ``candidates`` whose files hold ``module`` (or the nearest package above it: a
    name imported from a module)."""
    if len(candidates) == 1:
        return candidates[0]
    files = {c: [str(f) for f in importlib.metadata.distribution(c).files or []] for c in candidates}
    parts = module.split(".")
    while len(parts) > 1:
        path = "/".join(parts)
        holders = [c for c in candidates if any(f.startswith((f"{path}/", f"{path}.py")) for f in files[c])]
        if len(holders) == 1:
            return holders[0]
        parts.pop()
    raise AssertionError(f"{module}: no one of {candidates} holds it")


def declared(pyproject: str) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in tomllib.loads(pyproject)["project"]["dependencies"]}


def production_sources(package: str) -> dict[str, str]:
    folder = BASE_DIR / package
    return {
        str(path): path.read_text()
        for path in folder.rglob("*.py")
        if "tests" not in path.relative_to(folder).parts and "migrations" not in path.relative_to(folder).parts
    }


def test_each_installed_context_the_platform_the_kernel_and_the_operators_views_is_a_distribution():
    assert {d.package for d in installed()} | {"service_platform", "kernel", "operations"} <= set(DISTRIBUTIONS)


@pytest.mark.parametrize("package", DISTRIBUTIONS)
def test_a_distribution_declares_every_distribution_its_code_imports(package):
    pyproject = (BASE_DIR / package / "pyproject.toml").read_text()
    assert canonicalize_name(tomllib.loads(pyproject)["project"]["name"]) == canonicalize_name(f"saga-shop-{package}")
    assert imported_distributions(package, production_sources(package)) <= declared(pyproject)


def test_the_contexts_declare_what_they_need_beyond_django_the_bus_and_the_kernel():
    needs = {
        package: declared((BASE_DIR / package / "pyproject.toml").read_text())
        - {"django", "django-reliable-messaging", "saga-shop-kernel"}
        for package in DISTRIBUTIONS
    }
    expected = {
        "inventory": set(),
        "kernel": {"djangorestframework", "drf-spectacular", "prometheus-client"},
        "operations": set(),
        "orchestrator": {"prometheus-client"},
        "orders": {"djangorestframework", "drf-spectacular", "prometheus-client", "saga-shop-operations"},
        "payments": {"prometheus-client", "psycopg", "requests", "urllib3"},
        "service_platform": {
            "saga-shop-operations",
            "django-environ",
            "djangorestframework",
            "drf-spectacular",
            "drf-spectacular-sidecar",
            "django-csp",
            "django-axes",
            "whitenoise",
            "psycopg",
            "structlog",
            "prometheus-client",
            "gunicorn",
            "opentelemetry-api",
            "opentelemetry-sdk",
            "opentelemetry-exporter-otlp-proto-http",
            "opentelemetry-instrumentation-django",
            "opentelemetry-instrumentation-psycopg",
        },
        "shipping": set(),
    }
    # A context removed (its folder gone) is not expected; one scaffolded since is checked above.
    assert {package: needs[package] for package in expected if package in needs} == {
        package: wanted for package, wanted in expected.items() if package in needs
    }


def test_startcontext_writes_a_distribution_that_declares_what_its_code_imports():
    request = Request(name="loyalty", consumes=("orders.order.confirmed",), publishes=("loyalty.points.granted",))
    files = files_of(request)
    pyproject = files.pop("loyalty/pyproject.toml")
    production = {path: text for path, text in files.items() if path.endswith(".py") and "/tests/" not in path}

    assert tomllib.loads(pyproject)["project"]["name"] == "saga-shop-loyalty"
    assert declared(pyproject) == {"django", "django-reliable-messaging", "saga-shop-kernel"}
    assert imported_distributions("loyalty", production) <= declared(pyproject)


def own_versions() -> dict[str, str]:
    """The version each of this project's distributions carries now, by name."""
    pyprojects = [BASE_DIR / "packages" / "django-reliable-messaging" / "pyproject.toml"]
    pyprojects += [BASE_DIR / package / "pyproject.toml" for package in DISTRIBUTIONS]
    return {
        project["name"]: project["version"]
        for project in (tomllib.loads(path.read_text())["project"] for path in pyprojects)
    }


@pytest.mark.parametrize("package", [*DISTRIBUTIONS, "startcontext"])
def test_a_distribution_admits_the_versions_of_the_projects_own_distributions(package):
    """A version bump of the bus (or the kernel) left behind in a range makes a service's requirements
    unsatisfiable: ``make service`` would build a tree pip cannot install."""
    if package == "startcontext":
        request = Request(name="loyalty", consumes=("orders.order.confirmed",), publishes=())
        pyproject = files_of(request)["loyalty/pyproject.toml"]
    else:
        pyproject = (BASE_DIR / package / "pyproject.toml").read_text()
    versions = own_versions()
    requirements = [Requirement(r) for r in tomllib.loads(pyproject)["project"]["dependencies"]]
    refused = [str(r) for r in requirements if r.name in versions and versions[r.name] not in r.specifier]
    assert refused == []
