"""Bounded contexts stay splittable and declare themselves.

import-linter (run by ``make test``) checks the Python imports; string references such as
``ForeignKey("other_app.Model")`` are invisible to it, so this test checks the models. It also
keeps ``kernel`` and ``messaging`` free of any context's name, queue or routing key (they read
the declarations), the import contracts in step with the installed list, and each queue's
bindings equal to the handlers its context declared.
"""

import ast
import importlib
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from reliable_messaging import _registry as registry
from reliable_messaging._declarations import (
    DeclarationError,
    installed,
    known_packages,
    read_declarations,
)
from reliable_messaging._topology import EVENT_LOG_CONSUMER, consumers, queue_bindings, subscribers_of

from devtools.import_contracts import BUS, PUBLIC, REACHES_INSIDE, TESTS_ONLY, contract_contexts, current, render

BASE_DIR = Path(settings.BASE_DIR)
CONTEXT_NAMES = [d.name for d in installed()]


def test_no_model_relation_crosses_a_context():
    own_labels = {*CONTEXT_NAMES, "messaging"}
    crossings = []
    for model in apps.get_models():
        own = model._meta.app_label
        if own not in own_labels:
            continue
        for field in model._meta.get_fields():
            related = getattr(field, "related_model", None)
            # the bus's tables are no context's (a saga's view, as orders.ReturnSaga, reads its history)
            if related is not None and related._meta.app_label not in (own, "messaging"):
                crossings.append(f"{own}.{model.__name__}.{field.name} -> {related._meta.label}")
    assert crossings == []


def test_the_monolith_hosts_every_installed_context_and_the_saga_is_decided_by_three():
    assert CONTEXT_NAMES == [p.rsplit(".", 1)[-1] for p in settings.INSTALLED_CONTEXTS]
    assert settings.CONTEXTS == CONTEXT_NAMES
    # Orders, payments and inventory decide the saga's outcome; shipping and any context added by
    # startcontext only follow it (their tests are theirs, the saga's need no edit: shipping's own
    # say it follows, shipping/tests/unit/test_declaration.py).
    # ("follows" is the project's own key of context.toml: MESSAGING["DECLARATION_KEYS"].)
    assert [d.name for d in installed() if not d.extra.get("follows")] == ["orders", "payments", "inventory"]


def test_the_kernel_the_operators_views_and_the_bus_name_no_context_queue_or_routing_key():
    words = set(CONTEXT_NAMES)
    words |= {d.queue for d in installed()}
    words |= {key for d in installed() for key in (*d.consumes, *d.publishes)}
    pattern = re.compile(r"\b(" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")\b")
    found = []
    folders = [BASE_DIR / "kernel", BASE_DIR / "operations", BASE_DIR / "packages" / "django-reliable-messaging"]
    assert all(folder.is_dir() for folder in folders)
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            # A test may name a real event as its example; the code may not. Hidden folders (.nox's
            # virtualenvs, .venv) hold other projects' code.
            inside = path.relative_to(folder).parts
            if path.suffix not in (".py", ".html", ".txt", ".toml") or {"migrations", "tests"} & set(path.parts):
                continue
            if any(part.startswith(".") for part in inside):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if match := pattern.search(line):
                    found.append(f"{path.relative_to(BASE_DIR)}:{number}: {match.group(0)}")
    assert found == []


def test_nothing_outside_the_tests_imports_them():
    """``make chaos``, ``make bench`` and the scripts run from a tree without ``tests`` on their path
    (import-linter misses ``tests``, not a package it knows, and an import inside a function)."""
    found = []
    folders = [f for f in BASE_DIR.iterdir() if f.is_dir() and f.name not in ("tests", "var") and f.name[0] != "."]
    paths = (path for folder in folders for path in folder.rglob("*.py"))
    for path in sorted(p for p in paths if not any(part[0] == "." for part in p.relative_to(BASE_DIR).parts)):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(name == "tests" or name.startswith("tests.") for name in names):
                found.append(f"{path.relative_to(BASE_DIR)}:{node.lineno}")
    assert found == []


def bus_modules_imported(path: Path) -> list[tuple[int, str]]:
    """Each module of the bus the file imports, with its line (``from reliable_messaging import x``
    imports the module ``reliable_messaging.x`` where there is one)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name == BUS or a.name.startswith(f"{BUS}.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == BUS:
            for alias in node.names:
                module = f"{BUS}.{alias.name}"
                found.append((node.lineno, module if importlib.util.find_spec(module) else BUS))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(f"{BUS}."):
            found.append((node.lineno, node.module))
    return found


def test_the_scripts_bench_and_chaos_import_only_the_bus_s_public_modules():
    """What import-linter does not see (files run as scripts: manage.py, ``scripts``, ``bench``,
    ``chaos``) goes through the bus's front door too: devtools/import_contracts.py's ``PUBLIC``, and
    ``TESTS_ONLY`` in the test and benchmark tooling. ``REACHES_INSIDE`` names each exception, and
    one no longer used fails here too (the fault library's, which the import contract also allows)."""
    files = [BASE_DIR / "manage.py"]
    files += sorted(
        path for folder in ("scripts", "bench", "chaos", "faultlib") for path in (BASE_DIR / folder).rglob("*.py")
    )
    found, used = [], set()
    for path in files:
        relative = path.relative_to(BASE_DIR)
        importer = ".".join(relative.with_suffix("").parts)
        tooling = relative.parts[0] in ("bench", "chaos", "faultlib")
        for line, module in bus_modules_imported(path):
            name = module.removeprefix(f"{BUS}.")
            if name in REACHES_INSIDE.get(importer, ()):
                used.add((importer, name))
            elif module == BUS or name not in (*PUBLIC, *([TESTS_ONLY] if tooling else [])):
                found.append(f"{relative}:{line}: {module}")
    assert found == [], f"the bus's public modules are {', '.join(PUBLIC)} (devtools/import_contracts.py)"
    allowed = {(importer, name) for importer, names in REACHES_INSIDE.items() for name in names}
    assert allowed - used == set(), "REACHES_INSIDE allows imports no longer made: remove them"


@pytest.mark.parametrize("module", [m for m in (*PUBLIC, TESTS_ONLY) if m != "models"])  # models: Django's names
def test_each_public_module_of_the_bus_has_every_name_it_lists(module):
    public = importlib.import_module(f"{BUS}.{module}")
    assert public.__all__ and [name for name in public.__all__ if not hasattr(public, name)] == []


def test_the_settings_import_hosting_before_django_is_set_up():
    """config/settings.py reads the declarations through ``hosting``: it loads no app, no model."""
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, {BUS}.hosting; print(sorted(m for m in sys.modules if m.startswith('{BUS}.')))",
        ],
        env={k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"'{BUS}.models'" not in loaded and f"'{BUS}.broker'" not in loaded, loaded


def test_the_import_contracts_are_those_generated_from_the_installed_contexts():
    pyproject = BASE_DIR / "pyproject.toml"
    expected = render(contract_contexts(BASE_DIR, list(settings.INSTALLED_CONTEXTS)))
    assert current(pyproject) == expected, (
        "pyproject.toml's import contracts differ from the installed contexts': "
        "run `DEBUG=1 .venv/bin/python manage.py import_contracts --write`"
    )
    linter = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    assert {d.package for d in installed()} <= set(linter["root_packages"])


def test_the_import_contracts_cover_every_context_of_the_tree():
    """The orchestrator is in the tree whether or not ORCHESTRATOR installs it; a new context too."""
    contexts = contract_contexts(BASE_DIR, ["orders", "payments"])
    assert contexts[:2] == ["orders", "payments"]
    assert {*CONTEXT_NAMES, "orchestrator"} <= set(contexts)
    assert "bench" not in contexts and len(contexts) == len(set(contexts))
    layers = tomllib.loads(render(["a", "b"]))["tool"]["importlinter"]["contracts"][0]["layers"]
    assert layers == ["config | devtools", "a | b", "service_platform", "operations", "kernel", "reliable_messaging"]


def test_each_queue_is_bound_to_exactly_the_keys_its_context_declares():
    bindings = queue_bindings()
    assert list(bindings) == [*CONTEXT_NAMES, EVENT_LOG_CONSUMER]
    # one example, exactly: a participant's queue (a follower's is its own tests')
    assert bindings["payments"] == (
        "inventory.stock.reservation_failed",
        "orders.order.cancelled",
        "orders.order.created",
        "orders.order.failed",
        "orders.return.refund",  # the return saga's command, obeyed wherever orders is installed
    )
    assert bindings[EVENT_LOG_CONSUMER] == ("#",)
    for declaration in installed():
        assert bindings[declaration.name] == tuple(sorted(declaration.consumes))


def test_every_hosted_consumer_handles_exactly_what_its_queue_is_bound_to():
    # An unhandled binding would dead-letter every such message as unknown_event_type; a handler
    # for an unbound key would never run.
    assert registry.local_consumers() == consumers()  # the monolith hosts every consumer
    for consumer in consumers():
        assert registry.registered_keys(consumer) == registry.binding_keys(consumer), consumer


def test_every_consumed_key_is_published_by_an_installed_context_and_every_event_is_heard():
    published = {event for d in installed() for event in d.publishes}
    consumed = {key for d in installed() for key in d.consumes}
    assert consumed - published == set()
    for event_type in sorted(published):
        assert EVENT_LOG_CONSUMER in subscribers_of(event_type), event_type
    # The saga's own events each reach a context besides the event log.
    for event_type in sorted(consumed):
        assert len(subscribers_of(event_type)) >= 2, event_type


def test_every_context_publishes_only_under_its_own_name_from_its_own_code():
    for declaration in installed():
        source = "\n".join(p.read_text() for p in (BASE_DIR / declaration.package).rglob("*.py"))
        for event_type in re.findall(r'"([a-z_]+\.[a-z_]+\.[a-z_]+)"', source):
            if event_type.startswith(f"{declaration.name}."):
                assert event_type in declaration.publishes, f"{declaration.name} publishes undeclared {event_type}"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('name = "Shipping"', "must be lower_snake_case"),
        ('name = "events"', "must be lower_snake_case and not one of ['events']"),
        ('name = "x"\n[publishes]\n"y.a.b" = "step"', "a context publishes only 'x.<aggregate>.<event>'"),
        ('name = "x"\n[consumes]\n"y.a.b" = "elsewhere.handlers.f"', "the handler must be 'x.<module>.<function>'"),
    ],
)
def test_a_wrong_declaration_is_refused_naming_its_file_and_the_fix(tmp_path, text, error):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "context.toml").write_text(text)
    with pytest.raises(DeclarationError) as refused:
        read_declarations(tmp_path, ("x",))
    assert str(refused.value).startswith("x/context.toml: ") and error in str(refused.value)


def test_a_missing_declaration_says_what_a_deployment_must_carry(tmp_path):
    with pytest.raises(DeclarationError, match=r"x/context.toml is missing: a deployment's tree carries the decl"):
        read_declarations(tmp_path, ("x",))


def test_a_deployment_that_names_its_contexts_reads_only_the_declarations_its_tree_carries(tmp_path):
    for package in ("orders", "notifications"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "context.toml").write_text(f'name = "{package}"\n')
    packages = ("orders", "payments", "notifications")
    assert known_packages(tmp_path, packages, None) == packages  # the monolith: all, a missing one an error
    # A deployment that joined alone: CONTEXTS named, what it reads validated with the shared schemas.
    assert known_packages(tmp_path, packages, ["notifications"], shared_schemas=True) == ("orders", "notifications")
    assert known_packages(tmp_path, packages, ["payments"], shared_schemas=True) == packages  # hosted: required
    # Without the shared schemas, a lost declaration stays an error (a packaging mistake is not silent).
    assert known_packages(tmp_path, packages, ["notifications"]) == packages
