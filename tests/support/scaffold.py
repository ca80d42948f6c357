"""A copy of the project's tree in which ``startcontext`` scaffolds a context (tests/e2e/test_startcontext.py,
tests/e2e/test_join_alone.py)."""

import os
import subprocess
from pathlib import Path

from faultlib.processes import BASE_DIR


def throwaway_name() -> str:
    """``notifications`` (the issue's example), or, in a tree that has one already (a context of
    that name installed for real), the first of ``notifications_2``, ``notifications_3``... it lacks."""
    names = ["notifications", *(f"notifications_{n}" for n in range(2, 10))]
    return next(name for name in names if not (BASE_DIR / name).exists())


def notifications(name: str) -> list[str]:
    """startcontext's arguments for a context that follows the saga's outcomes and tells customers."""
    return [
        "startcontext",
        name,
        "--consumes",
        "orders.order.confirmed,orders.order.failed",
        "--publishes",
        f"{name}.customer.notified",
    ]


def run(argv: list[str], cwd, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def tree_copy(tree: Path) -> Path:
    """The project's files (tracked and new, not ignored) in ``tree``, a git repository of its own,
    sharing the project's virtual environment."""
    tree.mkdir(parents=True)
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


def scaffold_env(var_dir: Path) -> dict[str, str]:
    """A developer's shell: no test run's database, broker or CONTEXTS."""
    env = {k: v for k, v in os.environ.items() if k not in {"CONTEXTS", "PYTHONPATH", "DATABASE_URL", "BROKER_URL"}}
    return env | {"DEBUG": "1", "VAR_DIR": str(var_dir)}


def scaffold(tree: Path, env: dict[str, str], name: str) -> subprocess.CompletedProcess:
    return run([str(tree / ".venv" / "bin" / "python"), "manage.py", *notifications(name)], tree, env)
