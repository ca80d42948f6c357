"""A context comes and goes by its folder and one line. In a copy of the tree, shipping removed as
docs/adding-a-context.md says (its folder, its line in ``INSTALLED_CONTEXTS``, then
``import_contracts --write``): the checks, the import contracts, ruff, the unit tier and pytest's
collection all pass, and the orchestrated saga, which sends shipping a step, refuses to start in one
line naming it. (tests/e2e/test_without_a_context.py runs the shop that is left.)"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.scaffold import tree_copy

BIN = Path(sys.executable).parent
INSTALLED_LINE = '    "shipping",\n'


@pytest.fixture(scope="module")
def without_shipping(tmp_path_factory):
    tree = tree_copy(tmp_path_factory.mktemp("removal") / "shop")
    shutil.rmtree(tree / "shipping")
    settings_file = tree / "config" / "settings.py"
    text = settings_file.read_text()
    assert text.count(INSTALLED_LINE) == 1
    settings_file.write_text(text.replace(INSTALLED_LINE, ""))
    # Its checkout (test_paths_named_exist lists the tree with git ls-files) has what is left.
    subprocess.run(["git", "add", "-A"], cwd=tree, check=True, capture_output=True)
    ours = {"PYTHONPATH", "CONTEXTS", "ORCHESTRATOR", "SAGA_STYLE", "DJANGO_SETTINGS_MODULE", "EVENT_SCHEMAS_DIR"}
    env = {**{k: v for k, v in os.environ.items() if k not in ours}, "DEBUG": "1"}

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            args, cwd=tree, env={**env, **extra}, capture_output=True, text=True, timeout=600, check=False
        )

    # Nothing outside the copy provides shipping (an editable install would hide its removal).
    assert run(sys.executable, "-c", "import shipping").returncode == 1
    written = run(sys.executable, "manage.py", "import_contracts", "--write")
    assert written.returncode == 0, written.stderr
    return tree, run


@pytest.mark.timeout(1200)
def test_without_shipping_the_checks_contracts_ruff_the_unit_tier_and_the_collection_pass(without_shipping):
    tree, run = without_shipping
    # The unit tier as `make test-unit` runs it (tests/unit and each context's <context>/tests/unit).
    unit_folders = ["tests/unit", *(str(p.relative_to(tree)) for p in sorted(tree.glob("*/tests/unit")))]
    done = {
        "check": run(sys.executable, "manage.py", "check"),
        "import contracts": run(sys.executable, "manage.py", "import_contracts", "--check"),
        "lint-imports": run(str(BIN / "lint-imports")),
        "ruff": run(str(BIN / "ruff"), "check", "."),
        "unit tier": run(str(BIN / "pytest"), *unit_folders, "-p", "no:schemathesis", "-p", "no:cacheprovider", "-rs"),
        "collection": run(str(BIN / "pytest"), "--collect-only", "-q", "-p", "no:cacheprovider"),
    }
    # each failure by its last lines: ruff's findings, pytest's summary of what failed or did not collect
    failed = [
        f"{name}:\n" + "\n".join((d.stdout + d.stderr).splitlines()[-25:]) for name, d in done.items() if d.returncode
    ]
    assert not failed, "\n\n".join(failed)
    # The orchestrated combinations cannot start without shipping: skipped, saying so.
    reason = "the orchestrated saga needs shipping, not installed (INSTALLED_CONTEXTS)"
    assert done["unit tier"].stdout.count(reason) == 3
    # A cross-context test about shipping stays collected, and is skipped saying why (tests/conftest.py).
    module = "tests/integration/test_bulk_handlers.py"
    shipping_test = f"{module}::test_shipping_prepares_one_shipment_per_confirmed_order_of_a_batch"
    assert shipping_test in done["collection"].stdout
    skipped = run(str(BIN / "pytest"), shipping_test, "-rs", "-p", "no:cacheprovider")
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout[-3000:]
    assert f"SKIPPED [1] {module}:" in skipped.stdout
    assert skipped.stdout.count(": shipping not installed (INSTALLED_CONTEXTS)") == 1


def test_without_shipping_the_orchestrated_saga_refuses_to_start_naming_it(without_shipping):
    _, run = without_shipping
    done = run(sys.executable, "manage.py", "check", ORCHESTRATOR="1")
    assert (done.returncode, done.stdout, done.stderr) == (
        1,
        "",
        "Configuration error: orchestrator consumes shipping.shipment.created, and shipping is not installed "
        "(INSTALLED_CONTEXTS): install shipping, or leave orchestrator out\n",
    )
