"""docs/adding-a-context.md, proven: in a copy of the tree, ``startcontext`` scaffolds and installs a
fifth context; two existing files change besides the generated documents, the lint and the
import contracts pass, and the tiers run there, unchanged, with it installed."""

import os
import subprocess
import sys

import pytest

from faultlib.processes import BASE_DIR

NAME = "notifications"
SCAFFOLD = [
    "startcontext",
    NAME,
    "--consumes",
    "orders.order.confirmed,orders.order.failed",
    "--publishes",
    "notifications.customer.notified",
]
# The unit and integration tiers, unchanged, and the new context's own tests.
TIERS = ["tests/unit", "tests/integration", NAME]


def run(argv: list[str], cwd, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def tree(tmp_path):
    """The project's files (tracked and new, not ignored) in a git repository of their own."""
    tree = tmp_path / "shop"
    tree.mkdir()
    listed = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], BASE_DIR, dict(os.environ))
    files = [f for f in listed.stdout.split("\0") if f and (BASE_DIR / f).is_file()]
    packed = subprocess.run(
        ["tar", "cf", "-", "--null", "-T", "-"], cwd=BASE_DIR, input="\0".join(files).encode(), capture_output=True
    )
    subprocess.run(["tar", "xf", "-"], cwd=tree, input=packed.stdout, check=True)
    (tree / ".venv").symlink_to(BASE_DIR / ".venv")
    for git in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", *git], cwd=tree, check=True, capture_output=True)
    return tree


def test_startcontext_installs_a_working_context_changing_two_files(tree, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"CONTEXTS", "PYTHONPATH", "DATABASE_URL", "BROKER_URL"}}
    env |= {"DEBUG": "1", "VAR_DIR": str(tmp_path / "var")}
    python = str(tree / ".venv" / "bin" / "python")

    made = run([python, "manage.py", *SCAFFOLD], tree, env)
    assert made.returncode == 0, made.stdout + made.stderr

    status = run(["git", "status", "--porcelain", "--untracked-files=all"], tree, env).stdout.splitlines()
    changed = sorted(line[3:] for line in status if not line.startswith("??"))
    added = sorted(line[3:] for line in status if line.startswith("??"))
    generated = ["docs/asyncapi.yaml"]
    assert [f for f in changed if f not in generated] == ["config/settings.py", "pyproject.toml"]
    assert "docs/schemas-snapshot/notifications.customer.notified.v1.json" in added
    assert all(f.startswith(f"{NAME}/") for f in added if not f.startswith("docs/"))
    assert {f"{NAME}/context.toml", f"{NAME}/migrations/0001_initial.py", f"{NAME}/tests/test_{NAME}.py"} <= set(added)
    assert "notifications.customer.notified.v1" in (tree / "docs" / "asyncapi.yaml").read_text()

    for lint in (["ruff", "check", "."], ["ruff", "format", "--check", "."], ["lint-imports"]):
        checked = run([str(tree / ".venv" / "bin" / lint[0]), *lint[1:]], tree, env)
        assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    # Its own schema check, as make test runs it: the snapshot was written with the context.
    frozen = run([python, "manage.py", "event_schemas"], tree, {**env, "ORCHESTRATOR": "1"})
    assert frozen.returncode == 0, frozen.stdout + frozen.stderr

    # Unchanged tests, with the new context installed (its own vhost and test database).
    pytest_argv = [python, "scripts/with_test_services.py", str(tree / ".venv" / "bin" / "pytest"), *TIERS]
    tested = run([*pytest_argv, "-p", "no:randomly", "-p", "no:cacheprovider"], tree, env, timeout=900)
    assert tested.returncode == 0, tested.stdout[-6000:] + tested.stderr[-3000:]
    assert f"{NAME}/tests/test_{NAME}.py .." in tested.stdout, tested.stdout[-3000:]


def test_startcontext_refuses_what_would_not_work(tree, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"CONTEXTS", "PYTHONPATH", "DATABASE_URL", "BROKER_URL"}}
    env |= {"DEBUG": "1", "VAR_DIR": str(tmp_path / "var")}
    cases = [
        (["shipping"], "shipping/ exists already"),
        (["events"], "is lower_snake_case and not one of ['events']"),
        (["billing", "--consumes", "orders.order.shipped"], "--consumes orders.order.shipped: no installed context"),
        (["billing", "--consumes", "orders.order.created"], "it has versions 1..2, so its reader needs an upcaster"),
        (["billing", "--publishes", "orders.invoice.sent"], "a context publishes only 'billing.<aggregate>.<event>'"),
    ]
    for args, message in cases:
        refused = run([sys.executable, "manage.py", "startcontext", *args], tree, env)
        assert refused.returncode == 1 and message in refused.stderr, (args, refused.stderr)
    status = run(["git", "status", "--porcelain", "--untracked-files=all"], tree, env).stdout
    assert status == ""  # nothing written
