"""The import contracts (import-linter, ``pyproject.toml``'s ``[tool.importlinter]``), generated from
the contexts in the tree, so installing one needs no hand edit: ``python manage.py startcontext``
writes them, ``python manage.py import_contracts --write`` after anything else, and
``tests/unit/test_architecture.py`` fails, saying so, when the file and this rendering differ.

The contexts are the installed list (``INSTALLED_CONTEXTS``) first, then every other top-level
package of the tree that declares itself (the orchestrator, installed only with ``ORCHESTRATOR=1``).
A context imports the bus's public modules only (``api``, ``operator``, ``sagas``), and its own
``tests`` package ``reliable_messaging.testing`` and ``models`` (the bus's tables, read) too; a
package's own ``tests`` (each context's, the platform's, the kernel's) may use the fault library
(``faultlib``), which the rest of the application never imports. The
platform (``service_platform``) imports no context, and nothing a service ships imports the monolith's
composition root (``config``) or its development tooling (``devtools``, this module's package). The rest
of the project's code (the composition root, the platform, the shared kernel, the operator's views, the
fault library) goes through the bus's front door too: ``PUBLIC`` (``TESTS_ONLY`` in tests and test
tooling); ``tests/unit/test_architecture.py`` holds the scripts, ``bench`` and ``chaos``, which
import-linter does not see, to the same.
"""

import json
import re
from pathlib import Path

from reliable_messaging.hosting import DECLARATION_FILE

SECTION = "[tool.importlinter]"
# The monolith's own: its composition root and its development tooling, which no service ships.
MONOLITH = ("config", "devtools")
# What every service runs besides its context.
PLATFORM = "service_platform"
# The bus, installed from packages/django-reliable-messaging
BUS = "reliable_messaging"
# Its front door: the only modules of it the project's code imports (its README's "Public API").
PUBLIC = ("api", "operator", "sagas", "hosting", "models")
# Its test harness: for tests and the test tooling (faultlib) only.
TESTS_ONLY = "testing"
# The fake card gateway: a development service of its own (not a context), installed by name only.
# Nothing of the application imports it; of it, only its in-process stand-in of payments' client
# imports a context: the client's results and exceptions (payments.gateway) and its settings.
FAKE_GATEWAY = "fake_gateway"
FAKE_GATEWAY_STAND_IN = {f"{FAKE_GATEWAY}.in_process": ("payments.gateway", "payments.conf")}
# Tooling that reaches past the front door, each module with the bus's modules and why
# (test_architecture fails on an entry no longer used).
REACHES_INSIDE = {
    # A white-box profiler of the bus (make bench --profile): it wraps the relay's and the
    # publisher's own functions with timers.
    "bench.relay_phases": ("_relay", "_publisher"),
}


def contract_contexts(base_dir: Path, installed: list[str]) -> list[str]:
    top_level = [p for p in installed if "." not in p]
    declared = sorted(p.parent.name for p in base_dir.glob(f"*/{DECLARATION_FILE}"))
    return [*top_level, *(name for name in declared if name not in top_level)]


def render(contexts: list[str]) -> str:
    def listed(names) -> str:
        return json.dumps(list(names))

    tests_may_use = [f"{c}.tests.** -> {BUS}.{TESTS_ONLY}" for c in contexts]
    contexts_may_use = [f"** -> {BUS}.{module}" for module in ("api", "operator", "sagas")]
    # A context's tests read the bus's tables too (the outbox rows its services wrote), as the project's do.
    tests_may_read = [f"{c}.tests.** -> {BUS}.models" for c in contexts]
    # A package's own tests (each context's, the platform's, the kernel's) start processes and use the
    # shared fixtures and helpers of the fault library, as tests/ does; the code they test never does.
    tests_may_use_faultlib = [f"{package}.tests.** -> faultlib.**" for package in [PLATFORM, "kernel", *contexts]]
    front_door = [f"** -> {BUS}.{module}" for module in PUBLIC]
    stand_in = [f"{importer} -> {module}" for importer, modules in FAKE_GATEWAY_STAND_IN.items() for module in modules]
    faultlib_inside = [
        f"{importer} -> {BUS}.{module}"
        for importer, modules in REACHES_INSIDE.items()
        if importer.startswith("faultlib.")
        for module in modules
    ]
    return f"""{SECTION}
# Generated from the installed contexts by `python manage.py import_contracts --write` (startcontext
# runs it): do not edit by hand; devtools/import_contracts.py is the template.
root_packages = {listed([*MONOLITH, PLATFORM, "operations", "kernel", BUS, *contexts, "faultlib", FAKE_GATEWAY])}
include_external_packages = true

[[tool.importlinter.contracts]]
name = "Layers: the monolith's root and tooling, the contexts, the platform, the operator's views, the kernel, the bus"
type = "layers"
layers = {listed([" | ".join(MONOLITH), " | ".join(contexts), PLATFORM, "operations", "kernel", BUS])}
containers = []
exhaustive = false

[[tool.importlinter.contracts]]
name = "The monolith's root and tooling wire the contexts without importing them (a deployment lacks the others' code)"
type = "forbidden"
source_modules = {listed(MONOLITH)}
forbidden_modules = {listed(contexts)}

[[tool.importlinter.contracts]]
name = "The platform imports no context: a service carries its own context only"
type = "forbidden"
source_modules = {listed([PLATFORM])}
forbidden_modules = {listed(contexts)}

[[tool.importlinter.contracts]]
name = "What a service ships never imports the monolith's composition root nor its development tooling"
type = "forbidden"
source_modules = {listed([PLATFORM, "operations", "kernel", *contexts, FAKE_GATEWAY])}
forbidden_modules = {listed(MONOLITH)}

[[tool.importlinter.contracts]]
name = "The bus is a library: it imports nothing of this project"
type = "forbidden"
source_modules = {listed([BUS])}
forbidden_modules = {listed([*MONOLITH, PLATFORM, "kernel", "faultlib", *contexts])}

[[tool.importlinter.contracts]]
name = "The shared kernel imports no context, not the platform and not the composition root"
type = "forbidden"
source_modules = ["kernel"]
forbidden_modules = {listed([*MONOLITH, PLATFORM, "operations", *contexts])}

[[tool.importlinter.contracts]]
name = "The operator's views read the bus through its public modules only, and no context"
type = "forbidden"
source_modules = ["operations"]
forbidden_modules = {listed([f"{BUS}.**", *contexts])}
ignore_imports = {listed([f"operations.** -> {BUS}.operator"])}
unmatched_ignore_imports_alerting = "none"
allow_indirect_imports = true

[[tool.importlinter.contracts]]
name = "Contexts use only the bus's public modules (api, operator, sagas; testing and models in their own tests)"
type = "forbidden"
source_modules = {listed(contexts)}
forbidden_modules = ["{BUS}.**"]
ignore_imports = {listed([*contexts_may_use, *tests_may_use, *tests_may_read])}
unmatched_ignore_imports_alerting = "none"
allow_indirect_imports = true

[[tool.importlinter.contracts]]
name = "The project reaches the bus through its front door: {", ".join(PUBLIC)} ({TESTS_ONLY}: tests, faultlib)"
type = "forbidden"
source_modules = {listed([*MONOLITH, PLATFORM, "kernel", "operations", *contexts, "faultlib"])}
forbidden_modules = ["{BUS}.**"]
ignore_imports = {listed([*front_door, f"faultlib.** -> {BUS}.{TESTS_ONLY}", *tests_may_use, *faultlib_inside])}
unmatched_ignore_imports_alerting = "none"
allow_indirect_imports = true

[[tool.importlinter.contracts]]
name = "The application never imports the fault library (faultlib: tests, chaos and bench only)"
type = "forbidden"
source_modules = {listed([*MONOLITH, PLATFORM, "operations", "kernel", BUS, *contexts, FAKE_GATEWAY])}
forbidden_modules = ["faultlib"]
ignore_imports = {listed(tests_may_use_faultlib)}
unmatched_ignore_imports_alerting = "none"

[[tool.importlinter.contracts]]
name = "The fault library imports no context: each offers its steps and invariants from its own tests package"
type = "forbidden"
source_modules = ["faultlib"]
forbidden_modules = {listed(contexts)}
allow_indirect_imports = true

[[tool.importlinter.contracts]]
name = "The application knows the fake card gateway only by its HTTP API (installed by name in development)"
type = "forbidden"
source_modules = {listed([*MONOLITH, PLATFORM, "operations", "kernel", BUS, *contexts])}
forbidden_modules = {listed([FAKE_GATEWAY])}

[[tool.importlinter.contracts]]
name = "The fake card gateway is a service of its own: only its in-process stand-in knows payments' client"
type = "forbidden"
source_modules = {listed([FAKE_GATEWAY])}
forbidden_modules = {listed([*MONOLITH, PLATFORM, "operations", *contexts])}
ignore_imports = {listed(stand_in)}
unmatched_ignore_imports_alerting = "none"

[[tool.importlinter.contracts]]
name = "Only the bus talks to the broker (kombu, py-amqp)"
type = "forbidden"
source_modules = {listed([*MONOLITH, PLATFORM, "operations", "kernel", *contexts, FAKE_GATEWAY])}
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
