"""Bounded contexts stay splittable and declare themselves.

import-linter (run by ``make test``) checks the Python imports; string references such as
``ForeignKey("other_app.Model")`` are invisible to it, so this test checks the models. It also
keeps ``kernel`` and ``messaging`` free of any context's name, queue or routing key (they read
the declarations), the import contracts in step with the installed list, and each queue's
bindings equal to the handlers its context declared.
"""

import ast
import re
import tomllib
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings

from kernel.contexts import DeclarationError, installed, read_declarations
from messaging import registry
from messaging.topology import EVENT_LOG_CONSUMER, consumers, queue_bindings, subscribers_of

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
            if related is not None and related._meta.app_label != own:
                crossings.append(f"{own}.{model.__name__}.{field.name} -> {related._meta.label}")
    assert crossings == []


def test_the_installed_contexts_are_the_four_the_monolith_hosts():
    assert CONTEXT_NAMES == ["orders", "payments", "inventory", "shipping"]
    assert settings.CONTEXTS == CONTEXT_NAMES


def test_kernel_and_messaging_name_no_context_queue_or_routing_key():
    words = set(CONTEXT_NAMES)
    words |= {d.queue for d in installed()}
    words |= {key for d in installed() for key in (*d.consumes, *d.publishes)}
    pattern = re.compile(r"\b(" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")\b")
    found = []
    for package in ("kernel", "messaging"):
        for path in sorted((BASE_DIR / package).rglob("*")):
            if path.suffix not in (".py", ".html", ".txt", ".toml") or "migrations" in path.parts:
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
    for path in sorted(path for folder in folders for path in folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            if any(name == "tests" or name.startswith("tests.") for name in names):
                found.append(f"{path.relative_to(BASE_DIR)}:{node.lineno}")
    assert found == []


def test_the_import_contracts_name_every_installed_context():
    linter = tomllib.loads((BASE_DIR / "pyproject.toml").read_text())["tool"]["importlinter"]
    packages = [d.package for d in installed()]
    assert set(packages) <= set(linter["root_packages"])
    contracts = {c["name"]: c for c in linter["contracts"]}
    layers = contracts["Layers: the composition root, the contexts, messaging, the shared kernel"]["layers"]
    optional = [] if "orchestrator" in packages else ["orchestrator"]  # installed only with ORCHESTRATOR=1
    assert layers[1].split(" | ") == [*packages, *optional]
    for contract in contracts.values():
        for key in ("source_modules", "forbidden_modules"):
            listed = contract.get(key, [])
            if "orders" in listed:  # a contract about the contexts names all of them
                assert set(packages) <= set(listed), (contract["name"], key)


def test_each_queue_is_bound_to_exactly_the_keys_its_context_declares():
    bindings = queue_bindings()
    assert list(bindings) == [*CONTEXT_NAMES, EVENT_LOG_CONSUMER]
    assert bindings["shipping"] == ("orders.order.cancelled", "orders.order.confirmed")
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
        ('name = "x"\n[publishes]\n"x.a.b" = "loud"', "kind 'loud' is not one of"),
        ('name = "x"\n[consumes]\n"y.a.b" = "elsewhere.handlers.f"', "the handler must be 'x.<module>.<function>'"),
        ('name = "x"\nqueues = 1', "unknown keys ['queues']"),
    ],
)
def test_a_wrong_declaration_is_refused_naming_its_file_and_the_fix(tmp_path, text, error):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "context.toml").write_text(text)
    with pytest.raises(DeclarationError) as refused:
        read_declarations(tmp_path, ("x",))
    assert str(refused.value).startswith("x/context.toml: ") and error in str(refused.value)


def test_a_missing_declaration_says_what_a_deployment_must_carry(tmp_path):
    with pytest.raises(DeclarationError, match=r"x/context.toml is missing: every deployment's tree carries"):
        read_declarations(tmp_path, ("x",))
