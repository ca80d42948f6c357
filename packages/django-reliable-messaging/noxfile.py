"""The package's own tests against its built wheel, on each Python and Django it supports.

    nox                       # every cell on DATABASE_URL / BROKER_URL (unset: SQLite + the embedded broker)
    nox -s "tests(3.12-django6.0)"
    nox -s embedded           # the embedded default (SQLite, filesystem broker) whatever the environment says
    nox -s release            # sdist and wheel built, twine check --strict (also in a plain `nox`)
    nox -s types              # mypy --strict on the package (py.typed in its wheel; also in a plain `nox`)

Each session builds the wheel, installs it alone in a new virtual environment with the test tools,
and runs a copy of ``tests/`` in the session's own folder: only the wheel's copy of the package is
importable (each run prints where it was imported from). The first cell runs every test, the
others a selection (``selection`` below); positional arguments go to pytest after it
(``nox -s "tests(3.12-django6.0)" -- -m ""`` runs that cell whole).
"""

import os
import shutil
import zipfile
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|venv"  # uv installs in seconds; venv where it is missing
nox.options.sessions = ["tests", "embedded", "release", "types"]
nox.options.error_on_missing_interpreters = True  # a cell that cannot run fails, never passes skipped

HERE = Path(__file__).resolve().parent
# (Python, Django): every Django series the package supports, each on a Python it supports.
CELLS = [("3.11", "5.2"), ("3.12", "6.0"), ("3.12", "6.1"), ("3.13", "6.1")]

# pyenv's interpreters, ahead of its shims (which answer only for the versions a shell selected).
_PYENV = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
for _minor in sorted({python for python, _ in CELLS}):
    if _found := sorted(_PYENV.glob(f"{_minor}.*/bin"), key=lambda p: [int(n) for n in p.parent.name.split(".")]):
        os.environ["PATH"] = os.pathsep.join([str(_found[-1]), os.environ["PATH"]])
EVERY_EXTRA = "[crypto,fast,metrics,otel]"
ONLY_CRYPTO = "[crypto]"
TOOLS = ["pytest==9.2.0", "pytest-django==4.14.0", "pytest-timeout==2.4.0"]
# The type check's checker and stubs, and the dependencies whose own annotations it reads, exactly:
# a new release of one of them cannot fail `make test` by itself. Bump them together, on purpose.
TYPING = [
    "mypy==2.4.1",
    "django-stubs==6.1.2",  # with its mypy plugin; the series of the Django below
    "types-PyYAML==6.0.12.20261122",
    "types-jsonschema==4.26.0.20261006",
    "Django==6.1.3",
    "kombu==5.7.0",
    "psycopg[binary]==3.3.9",
    "structlog==26.1.0",
    "opentelemetry-api==1.45.2",
    "opentelemetry-sdk==1.45.2",
    "prometheus-client==0.26.0",
    "jsonschema-rs==0.61.0",
    "cryptography==50.0.2",
]


def build(session: nox.Session, *kinds: str) -> Path:
    """The distributions of this folder (``--wheel``, ``--sdist``; none named: both), in a new folder."""
    dist = Path(session.create_tmp()) / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    if session.venv_backend == "uv":
        session.run("uv", "build", "--quiet", *kinds, "--out-dir", str(dist), str(HERE), external=True)
    else:
        session.install("build==1.6.1")
        session.run("python", "-m", "build", *kinds, "--outdir", str(dist), str(HERE))
    return dist


def install_wheel(session: nox.Session, django: str, extras: str = "") -> None:
    (wheel,) = build(session, "--wheel").glob("django_reliable_messaging-*.whl")
    session.install(f"django-reliable-messaging{extras} @ {wheel.resolve().as_uri()}", f"Django~={django}.0", *TOOLS)


def selection(python: str, django: str) -> list[str]:
    """Which tests a cell runs: the first cell (every extra) every test, the minutes-long outage
    included (it reads the metrics extra's page); the last all but that one; the middle cells the
    tests that stay in one process, where a Python or Django difference shows first (the outer
    cells run manage.py as processes on both ends)."""
    if (python, django) == CELLS[0]:
        return []
    if (python, django) == CELLS[-1]:
        return ["-m", "not outage"]
    return ["-m", "not outage and not processes"]


def run_tests(session: nox.Session, env: dict | None = None, select: list[str] | None = None) -> None:
    copy = Path(session.create_tmp()) / "tests"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(HERE / "tests", copy, ignore=shutil.ignore_patterns("var", "__pycache__"))
    session.chdir(copy)
    where = "import django, reliable_messaging; print(django.get_version(), reliable_messaging.__file__)"
    session.run("python", "-c", where)  # the wheel's copy, and which Django
    session.run("pytest", "-q", *(select or []), *session.posargs, env=env)


# `make test-bus` runs two lanes at once (`nox -t lane-1`, `nox -t lane-2`), each on its own vhost
# and test database: the tests wait on the broker and on processes far more than they compute.
@nox.session
@nox.parametrize(
    ("python", "django"),
    [nox.param(p, d, id=f"{p}-django{d}", tags=[f"lane-{1 + 2 * i // len(CELLS)}"]) for i, (p, d) in enumerate(CELLS)],
)
def tests(session: nox.Session, django: str) -> None:
    # The first cell with every extra, the others with only "crypto" (the test project encrypts a
    # field, which needs it to start): the bus works without the others either way.
    install_wheel(session, django, EVERY_EXTRA if (session.python, django) == CELLS[0] else ONLY_CRYPTO)
    run_tests(session, select=selection(str(session.python), django))


@nox.session(python=CELLS[0][0], tags=["lane-2"])
def embedded(session: nox.Session) -> None:
    install_wheel(session, CELLS[0][1], ONLY_CRYPTO)
    run_tests(session, env={"DATABASE_URL": "", "BROKER_URL": ""}, select=["-m", "not outage"])


@nox.session(python=CELLS[-1][0], tags=["lane-2"])
def release(session: nox.Session) -> None:
    dist = build(session)
    session.install("twine==7.0.0")
    session.run("twine", "check", "--strict", *map(str, sorted([*dist.glob("*.whl"), *dist.glob("*.tar.gz")])))


@nox.session(python=CELLS[-1][0], tags=["lane-2"])
def types(session: nox.Session) -> None:
    """mypy --strict on the package's sources, as [tool.mypy] in pyproject.toml sets it, with every
    extra installed from the wheel (whose py.typed tells a user's type checker to read the package)."""
    (wheel,) = build(session, "--wheel").glob("django_reliable_messaging-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        if "reliable_messaging/py.typed" not in archive.namelist():
            session.error(f"{wheel.name} has no reliable_messaging/py.typed")
    session.install(f"django-reliable-messaging{EVERY_EXTRA} @ {wheel.resolve().as_uri()}", *TYPING)
    session.run("mypy", "--strict", "--cache-dir", str(Path(session.create_tmp()) / "mypy_cache"), *session.posargs)
