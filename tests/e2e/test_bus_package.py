"""The bus as a package another project installs (packages/django-reliable-messaging): its wheel
builds, installs into a fresh virtual environment alone, and its example project's tests pass
from a copy outside this repository, with only the wheel, pytest and pytest-django installed."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "packages" / "django-reliable-messaging"
# The versions this repository pins (requirements.txt): the example's only other tools.
TOOLS = ["pytest==9.2.0", "pytest-django==4.14.0"]


def run(command, cwd, env=None, timeout=600):
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, command))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(PACKAGE)], PACKAGE)
    (built,) = out.glob("django_reliable_messaging-*.whl")
    return built


def test_the_wheel_holds_the_bus_and_nothing_of_this_project(wheel):
    names = run([sys.executable, "-m", "zipfile", "-l", str(wheel)], PACKAGE)
    files = [line.split()[0] for line in names.splitlines()[1:]]
    tops = {f.split("/")[0] for f in files}
    assert tops == {"reliable_messaging", f"django_reliable_messaging-{version_of(wheel)}.dist-info"}
    for wanted in (
        "api.py",
        "operator.py",
        "testing.py",
        "migrations/0001_initial.py",
        "management/commands/run_consumers.py",
    ):
        assert f"reliable_messaging/{wanted}" in files
    assert any(f.startswith("reliable_messaging/templates/admin/messaging/") for f in files)


def version_of(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def test_the_example_passes_from_a_copy_with_only_the_wheel_installed(wheel, tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel), *TOOLS], tmp_path)
    example = tmp_path / "example"
    shutil.copytree(PACKAGE / "example", example, ignore=shutil.ignore_patterns("var", "__pycache__", ".pytest_cache"))
    # Nothing of this repository on the path, and no database server or broker named anywhere.
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8"}

    where = run([str(python), "-c", "import reliable_messaging; print(reliable_messaging.__file__)"], example, env)
    assert where.strip().startswith(str(venv)), where
    for ours in ("kernel", "config", "service_platform", "orders"):
        missing = subprocess.run([str(python), "-c", f"import {ours}"], cwd=example, env=env, capture_output=True)
        assert missing.returncode == 1, f"{ours} is importable beside the example"

    out = run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"], example, env)
    assert "5 passed" in out, out


def test_the_example_runs_on_the_bus_defaults_with_only_the_wheel(wheel, tmp_path):
    """The example's README, "Running it": no broker, folder or retention set in its settings."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = str(venv / "bin" / "python")
    run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)], tmp_path)
    example = tmp_path / "example"
    shutil.copytree(PACKAGE / "example", example, ignore=shutil.ignore_patterns("var", "__pycache__", ".pytest_cache"))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    (example / "var").mkdir()

    def manage(*args: str) -> str:
        return run([python, "manage.py", *args], example, env, timeout=120)

    manage("migrate", "-v", "0")
    send = "from greetings.services import send_greeting; send_greeting('ada@example.com', 'Hello')"
    manage("shell", "-v", "0", "-c", send)
    manage("run_outbox_relay", "--once")
    manage("run_consumers", "--once")
    count = "from mailroom.models import Letter; print(Letter.objects.count())"
    assert manage("shell", "-v", "0", "-c", count).strip() == "1"
    assert sorted(p.name for p in (example / "var" / "broker").iterdir()) == ["control", "data"]
    assert manage("purge_messages").strip() == "deleted: outbox 0, inbox 0, event log 0, dead letters 0"
