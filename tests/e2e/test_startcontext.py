"""docs/adding-a-context.md, proven: in a copy of the tree, ``startcontext`` scaffolds and installs a
fifth context; two existing files change besides the generated documents, the lint and the
import contracts pass, and the tiers run there, unchanged, with it installed."""

import json
import sys

import pytest

from tests.support.scaffold import run, scaffold, scaffold_env, throwaway_name, tree_copy

NAME = throwaway_name()
# The unit and integration tiers, unchanged, and the new context's own tests.
TIERS = ["tests/unit", "tests/integration", NAME]


@pytest.fixture
def tree(tmp_path):
    return tree_copy(tmp_path / "shop")


@pytest.mark.timeout(1200)  # beyond its own run of the copy's tiers (900 s), which a busy machine needs
def test_startcontext_installs_a_working_context_changing_two_files(tree, tmp_path):
    env = scaffold_env(tmp_path / "var")
    python = str(tree / ".venv" / "bin" / "python")

    made = scaffold(tree, env, NAME)
    assert made.returncode == 0, made.stdout + made.stderr

    status = run(["git", "status", "--porcelain", "--untracked-files=all"], tree, env).stdout.splitlines()
    changed = sorted(line[3:] for line in status if not line.startswith("??"))
    added = sorted(line[3:] for line in status if line.startswith("??"))
    generated = ["docs/asyncapi.yaml"]
    assert [f for f in changed if f not in generated] == ["config/settings.py", "pyproject.toml"]
    assert f"docs/schemas-snapshot/{NAME}.customer.notified.v1.json" in added
    assert all(f.startswith(f"{NAME}/") for f in added if not f.startswith("docs/"))
    own = [f"{NAME}/context.toml", f"{NAME}/migrations/0001_initial.py", f"{NAME}/tests/invariants.py"]
    assert {*own, f"{NAME}/tests/integration/test_{NAME}.py"} <= set(added)
    # its admin lists "messages received", not "Receiveds"
    assert "'verbose_name_plural': 'messages received'" in (tree / NAME / "migrations" / "0001_initial.py").read_text()
    assert f"{NAME}.customer.notified.v1" in (tree / "docs" / "asyncapi.yaml").read_text()

    for lint in (["ruff", "check", "."], ["ruff", "format", "--check", "."], ["lint-imports"]):
        checked = run([str(tree / ".venv" / "bin" / lint[0]), *lint[1:]], tree, env)
        assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    # Its own schema check, as make test runs it: the snapshot was written with the context.
    frozen = run([python, "manage.py", "event_schemas"], tree, {**env, "ORCHESTRATOR": "1"})
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr
    # Its fields filled in, as the recipe says: refused against the placeholder's snapshot until
    # the context is snapshotted afresh, as one not released yet.
    schema_file = tree / NAME / "schemas" / f"{NAME}.customer.notified.v1.json"
    schema = json.loads(schema_file.read_text())
    schema["properties"]["channel"] = {"type": "string"}
    schema["required"] = [*schema.get("required", []), "channel"]
    schema_file.write_text(json.dumps(schema, indent=2))
    frozen = run([python, "manage.py", "event_schemas"], tree, {**env, "ORCHESTRATOR": "1"})
    assert frozen.returncode == 1 and "new required field(s) ['channel']" in frozen.stderr, frozen.stderr
    fresh = run(
        [python, "manage.py", "event_schemas", "--snapshot", "--unreleased", NAME], tree, {**env, "ORCHESTRATOR": "1"}
    )
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert run([python, "manage.py", "event_schemas"], tree, {**env, "ORCHESTRATOR": "1"}).returncode == 0

    # Unchanged tests, with the new context installed (its own vhost and test database).
    pytest_argv = [python, "scripts/with_test_services.py", str(tree / ".venv" / "bin" / "pytest"), *TIERS]
    tested = run([*pytest_argv, "-p", "no:randomly", "-p", "no:cacheprovider"], tree, env, timeout=900)
    assert tested.returncode == 0, tested.stdout[-6000:] + tested.stderr[-3000:]
    assert f"{NAME}/tests/integration/test_{NAME}.py .." in tested.stdout, tested.stdout[-3000:]


def test_startcontext_refuses_what_would_not_work(tree, tmp_path):
    env = scaffold_env(tmp_path / "var")
    cases = [
        (["shipping"], "shipping/ exists already"),
        (["events"], "is lower_snake_case and not one of ['events']"),
        (["json"], "'json': a context's name is a Python package name of at most 40 characters that no"),
        (["class"], "'class': a context's name is a Python package name"),
        (["billing", "--consumes", "orders.order.shipped"], "--consumes orders.order.shipped: no installed context"),
        (["billing", "--publishes", "orders.invoice.sent"], "a context publishes only 'billing.<aggregate>.<event>'"),
    ]
    for args, message in cases:
        refused = run([sys.executable, "manage.py", "startcontext", *args], tree, env)
        assert refused.returncode == 1 and message in refused.stderr, (args, refused.stderr)
    status = run(["git", "status", "--porcelain", "--untracked-files=all"], tree, env).stdout
    assert status == ""  # nothing written


def test_a_reader_of_an_event_with_several_versions_binds_its_producers_upcasters(tree, tmp_path):
    """orders.order.created has four versions: the new reader binds orders' own steps, kept beside
    its schemas (kernel/upcasters.py), and reads a v1 order as v2; nobody copies a step."""
    env = scaffold_env(tmp_path / "var")
    python = str(tree / ".venv" / "bin" / "python")
    made = run([python, "manage.py", "startcontext", "billing", "--consumes", "orders.order.created"], tree, env)
    assert made.returncode == 0, made.stdout + made.stderr
    declaration = (tree / "billing" / "context.toml").read_text()
    assert (
        '[upcasters]\n"orders.order.created" = '
        '["billing.upcasters.order_created_v1_to_v2", "billing.upcasters.order_created_v2_to_v3", '
        '"billing.upcasters.order_created_v3_to_v4"]\n'
    ) in declaration
    code = [p for p in tree.rglob("*.py") if p.parts[len(tree.parts)] not in (".venv", "tests")]  # not the tests
    steps = [p for p in code if "def order_created_v1_to_v2" in p.read_text()]
    assert steps == [tree / "orders" / "schemas" / "upcasters.py"]

    v1 = {
        "order_id": "6f1c1a4e-0000-4000-8000-000000000001",
        "customer_id": "c",
        "total": "20.00",
        "currency": "USD",
        "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": "10.00"}],
        "payment_token": "tok_visa",
    }
    read = (
        "import json; from reliable_messaging.testing import validation_error; "
        "from billing.upcasters import order_created_v1_to_v2 as up; "
        f"v1 = {v1!r}; "
        "print(json.dumps([validation_error('orders.order.created', 1, v1), up(v1), "
        "validation_error('orders.order.created', 2, up(v1))]))"
    )
    done = run([python, "manage.py", "shell", "-c", read], tree, env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [  # after the shell's own line
        "",
        {
            "order_id": v1["order_id"],
            "customer_id": "c",
            "total": {"amount": "20.00", "currency": "USD"},
            "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": {"amount": "10.00", "currency": "USD"}}],
            "payment_token": "tok_visa",
        },
        "",
    ]
    assert run([python, "manage.py", "check"], tree, env).returncode == 0
