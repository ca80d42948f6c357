"""pytest collects ``tests/`` and each context's own ``<context>/tests/`` (pyproject's testpaths);
a context of the tree that is not installed (the orchestrator without ORCHESTRATOR=1) has no
tables or queue here, so its tests are not collected."""

from pathlib import Path

from django.conf import settings

from kernel.contexts import DECLARATION_FILE

_TREE = Path(__file__).parent
collect_ignore = [
    str(path.parent / "tests")
    for path in _TREE.glob(f"*/{DECLARATION_FILE}")
    if path.parent.name not in settings.INSTALLED_CONTEXTS
]
