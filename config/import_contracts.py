"""The import contracts (import-linter, ``pyproject.toml``'s ``[tool.importlinter]``), generated from
the contexts in the tree, so installing one needs no hand edit: ``python manage.py startcontext``
writes them, ``python manage.py import_contracts --write`` after anything else, and
``tests/unit/test_architecture.py`` fails, saying so, when the file and this rendering differ.

The contexts are the installed list (``INSTALLED_CONTEXTS``) first, then every other top-level
package of the tree that declares itself (the orchestrator, installed only with ``ORCHESTRATOR=1``).
A context's own ``tests`` package may use ``messaging.testing`` besides ``messaging.api``.
"""

import json
import re
from pathlib import Path

from kernel.contexts import DECLARATION_FILE

SECTION = "[tool.importlinter]"


def contract_contexts(base_dir: Path, installed: list[str]) -> list[str]:
    top_level = [p for p in installed if "." not in p]
    declared = sorted(p.parent.name for p in base_dir.glob(f"*/{DECLARATION_FILE}"))
    return [*top_level, *(name for name in declared if name not in top_level)]


def render(contexts: list[str]) -> str:
    def listed(names) -> str:
        return json.dumps(list(names))

    tests_may_use = [f"{c}.tests.** -> messaging.testing" for c in contexts]
    return f"""{SECTION}
# Generated from the installed contexts by `python manage.py import_contracts --write` (startcontext
# runs it): do not edit by hand; config/import_contracts.py is the template.
root_packages = {listed(["config", "kernel", "messaging", *contexts, "faultlib"])}
include_external_packages = true

[[tool.importlinter.contracts]]
name = "Layers: the composition root, the contexts, messaging, the shared kernel"
type = "layers"
layers = {listed(["config", " | ".join(contexts), "messaging", "kernel"])}
containers = []
exhaustive = false

[[tool.importlinter.contracts]]
name = "The composition root wires the hosted contexts without importing them (a deployment lacks the others' code)"
type = "forbidden"
source_modules = ["config"]
forbidden_modules = {listed(contexts)}

[[tool.importlinter.contracts]]
name = "messaging is generic: it imports no bounded context"
type = "forbidden"
source_modules = ["messaging"]
forbidden_modules = {listed(contexts)}

[[tool.importlinter.contracts]]
name = "The shared kernel imports nothing of ours"
type = "forbidden"
source_modules = ["kernel"]
forbidden_modules = {listed(["config", "messaging", *contexts])}

[[tool.importlinter.contracts]]
name = "Contexts use only messaging's public module (messaging.api; messaging.testing in their own tests)"
type = "forbidden"
source_modules = {listed(contexts)}
forbidden_modules = ["messaging.**"]
ignore_imports = {listed(["** -> messaging.api", *tests_may_use])}
unmatched_ignore_imports_alerting = "none"
allow_indirect_imports = true

[[tool.importlinter.contracts]]
name = "The application never imports the fault library (faultlib: tests, chaos and bench only)"
type = "forbidden"
source_modules = {listed(["config", "kernel", "messaging", *contexts])}
forbidden_modules = ["faultlib"]

[[tool.importlinter.contracts]]
name = "Only messaging talks to the broker (kombu, py-amqp)"
type = "forbidden"
source_modules = {listed(["config", "kernel", *contexts])}
forbidden_modules = ["kombu", "amqp"]
allow_indirect_imports = true
"""


def _bounds(text: str) -> tuple[int, int]:
    """Where the section starts, and where the next section that is not import-linter's begins."""
    start = text.index(SECTION)
    after = re.search(r"^\[(?!\[?tool\.importlinter)", text[start + len(SECTION) :], re.MULTILINE)
    return start, start + len(SECTION) + after.start() if after else len(text)


def current(pyproject: Path) -> str:
    """The file's import-linter section as it stands."""
    text = pyproject.read_text()
    start, end = _bounds(text)
    return text[start:end].rstrip() + "\n"


def write(pyproject: Path, section: str) -> bool:
    """Replace the section, and nothing after it; whether anything changed."""
    text = pyproject.read_text()
    start, end = _bounds(text)
    updated = text[:start] + section + ("\n" + text[end:] if text[end:] else "")
    if updated == text:
        return False
    pyproject.write_text(updated)
    return True
