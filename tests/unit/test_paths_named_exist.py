"""Every repository path that the docs, the READMEs, comments and docstrings name exists: a path
that moved is fixed where it is named, not left for a reader to trip on.

A path counts when its first folder is one of the repository's own (``docs/``, ``payments/``,
``tests/`` ...), the bus's package (``reliable_messaging/``) or the bus's old name (``messaging/``);
``notifications/models.py`` in a recipe, or a template name, is not the repository's."""

import re
import subprocess
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]
BUS = BASE_DIR / "packages" / "django-reliable-messaging"
PATH = re.compile(
    r"(?<![\w/.:$<{-])((?:[A-Za-z_][\w.-]*/)+[\w.-]*\.(?:py|md|toml|ya?ml|json|txt|cfg|ini|sh|template|conf|html))\b"
)


def tracked() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=BASE_DIR, capture_output=True, text=True, check=True).stdout
    return [BASE_DIR / name for name in listed.splitlines() if name.endswith((".md", ".py"))]


def repository_path(path: str, top: set[str]) -> bool:
    return path.split("/")[0] in top | {"reliable_messaging", "messaging"}


def found(path: str, named_in: Path) -> bool:
    bases = [BASE_DIR, BUS / "src", named_in.parent]
    if BUS in named_in.parents:  # the package's own docs and tests name paths from its folder
        bases.append(BUS)
    return any((base / path).exists() for base in bases)


def test_every_repository_path_named_in_docs_comments_and_docstrings_exists():
    files = tracked()
    top = {path.relative_to(BASE_DIR).parts[0] for path in files if len(path.relative_to(BASE_DIR).parts) > 1}
    missing = sorted(
        f"{file.relative_to(BASE_DIR)}: {path}"
        for file in files
        if file.exists()
        for path in set(PATH.findall(file.read_text(errors="replace")))
        if repository_path(path, top) and not found(path, file)
    )
    assert missing == []
