#!/usr/bin/env python3
"""`make serve`: the production web tier, nginx in front of gunicorn, in the foreground.

- Refuses to start, in one line, without ``SECRET_KEY`` and ``ALLOWED_HOSTS``: ``DEBUG`` is
  always off here.
- Renders ``deploy/nginx/nginx.conf.template`` into ``$VAR_DIR/serve/`` (the port, gunicorn's
  socket, the temporary and log folders, the body limit ``API_MAX_BODY_BYTES``) and checks it
  with ``nginx -t``; then migrates (and the fake gateway's database where ``FAKE_GATEWAY`` installs
  it) and collects the static files, as a deployment would.
- Runs gunicorn on a unix socket in a folder only nginx's workers may enter, and nginx
  (``daemon off``, ``-p``/``-c``) on ``--host``:``--port``.
- SIGINT or SIGTERM (Ctrl-C): nginx stops taking connections and finishes what it serves,
  gunicorn finishes its requests, both exit, then this exits 0. Either child dying stops the
  other and exits 1. Both children die with this process even if it is killed outright.

``PROMETHEUS_MULTIPROC_DIR`` defaults to an emptied ``$VAR_DIR/serve/prometheus`` (gunicorn
has several workers). ``NUM_PROXIES`` defaults to 1 (nginx is the one proxy that appends to
``X-Forwarded-For``), so the checkout throttle keys on the client nginx saw. ``CLIENT_TIMEOUT``
(seconds, default 10) is nginx's header, body and send timeout for slow clients.

Usage: scripts/serve.py [--host 0.0.0.0] [--port $PORT]
"""

import argparse
import ctypes
import grp
import os
import pwd
import shutil
import signal
import socket
import stat
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

from ensure_nginx import main as ensure_nginx  # a sibling: run as a script, scripts/ is on sys.path

BASE_DIR = Path(__file__).resolve().parent.parent
TEMPLATE = BASE_DIR / "deploy" / "nginx" / "nginx.conf.template"
ERROR_HEADERS = BASE_DIR / "deploy" / "nginx" / "error_headers.conf"
NGINX_BINARY = "/usr/sbin/nginx"
# nginx's workers drop to this user when the master runs as root (Debian's own user for them).
ROOT_WORKER_USER = "www-data"
STOP_GRACE = 35.0  # gunicorn's graceful_timeout (30 s) and a margin
PR_SET_PDEATHSIG = 1


class Placeholders(string.Template):
    """``${UPPERCASE}`` only: nginx's own ``$variables`` are lowercase and stay as they are."""

    delimiter = "$"
    idpattern = r"[A-Z][A-Z0-9_]*"
    flags = 0


def render(template: str, values: dict[str, str]) -> str:
    """The template with every ``${NAME}`` filled in; a name without a value is an error."""
    text = Placeholders(template).safe_substitute(values)
    if missing := sorted({m.group("braced") or m.group("named") for m in Placeholders.pattern.finditer(text)} - {None}):
        raise KeyError(f"no value for {', '.join(missing)} in {TEMPLATE.name}")
    return text


def die(message: str) -> NoReturn:
    print(f"make serve: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def load_settings():
    """Django's settings with DEBUG off, or one line saying what is missing."""
    os.environ["DEBUG"] = "0"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("NUM_PROXIES", "1")
    sys.path.insert(0, str(BASE_DIR))
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    # Not the settings' own message: it offers DEBUG=1, which make serve turns off whatever it was.
    required = (
        "make serve runs with DEBUG off, which needs both, "
        "e.g. SECRET_KEY=<50 random characters> ALLOWED_HOSTS=shop.example.com"
    )
    names = ("SECRET_KEY", "ALLOWED_HOSTS")
    try:
        missing = [name for name in names if not getattr(settings, name)]  # set, but empty: as good as missing
    except ImproperlyConfigured:
        missing = [name for name in names if not os.environ.get(name)]  # the settings read .env into it
    if missing:
        die(f"{' and '.join(missing)} not set: {required}")
    return settings


def manage(*args: str) -> None:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=BASE_DIR, check=False)
    if done.returncode:
        die(f"manage.py {' '.join(args)} failed (exit {done.returncode})")


def nginx_binary() -> str:
    found = shutil.which("nginx") or (NGINX_BINARY if os.access(NGINX_BINARY, os.X_OK) else None)
    if not found:
        die("nginx is not installed; as root: python3 scripts/ensure_nginx.py (apt-get install -y nginx)")
    return found


def private_folder(path: Path) -> None:
    """A folder only this user, and nginx's workers, may enter: gunicorn's socket lives there."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(path, 0, grp.getgrnam(ROOT_WORKER_USER).gr_gid)
        path.chmod(0o750)
    else:
        path.chmod(0o700)


def traversable_by(user: str, folder: Path) -> bool:
    """Whether ``user`` may pass through every folder from / down to ``folder``."""
    entry = pwd.getpwnam(user)
    groups = {entry.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    for part in [folder, *folder.parents]:
        mode = part.stat()
        if mode.st_uid == entry.pw_uid:
            allowed = mode.st_mode & stat.S_IXUSR
        elif mode.st_gid in groups:
            allowed = mode.st_mode & stat.S_IXGRP
        else:
            allowed = mode.st_mode & stat.S_IXOTH
        if not allowed:
            return False
    return True


def prepare(settings, host: str, port: int) -> tuple[Path, Path]:
    """Render the nginx configuration; its prefix folder and gunicorn's socket."""
    prefix = Path(settings.VAR_DIR) / "serve"
    run_dir, temp_dir, log_dir = prefix / "run", prefix / "temp", prefix / "log"
    for folder in (temp_dir, log_dir):
        folder.mkdir(parents=True, exist_ok=True)
    private_folder(run_dir)
    if os.geteuid() == 0 and not traversable_by(ROOT_WORKER_USER, prefix):
        # Its workers write request bodies under temp/ and reach gunicorn's socket under run/.
        die(
            f"nginx's workers ({ROOT_WORKER_USER}) cannot enter {prefix}: set VAR_DIR to a folder whose"
            " parents they may all pass through (e.g. /srv/shop/var), not one in a private home"
        )
    sock = run_dir / "gunicorn.sock"
    values = {
        "RUN_DIR": str(run_dir),
        "TEMP_DIR": str(temp_dir),
        "LOG_DIR": str(log_dir),
        "LISTEN": f"{host}:{port}",
        "UPSTREAM": f"unix:{sock}",
        "MAX_BODY_BYTES": str(settings.API_MAX_BODY_BYTES),
        "CLIENT_TIMEOUT": str(int(os.environ.get("CLIENT_TIMEOUT", "10"))),
        "ERROR_HEADERS": str(ERROR_HEADERS),
        "USER": f"user {ROOT_WORKER_USER};" if os.geteuid() == 0 else "",
    }
    (prefix / "nginx.conf").write_text(render(TEMPLATE.read_text(), values))
    return prefix, sock


def gunicorn_env(prefix: Path) -> dict[str, str]:
    """Several workers: /metrics adds up every worker's counters from an emptied folder."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return dict(os.environ)
    folder = prefix / "prometheus"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    return {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(folder)}


def die_with_parent() -> None:
    """In the child before exec: the kernel sends it SIGTERM if this process dies, even by SIGKILL."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    # Its own process group: the terminal's Ctrl-C reaches only this process, which then stops
    # each child the graceful way (nginx: SIGQUIT, gunicorn: SIGTERM).
    return subprocess.Popen(argv, cwd=BASE_DIR, env=env, preexec_fn=die_with_parent, process_group=0)  # noqa: PLW1509


def socket_answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def wait_for_socket(path: Path, gunicorn: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not socket_answers(path):
        if gunicorn.poll() is not None:
            die(f"gunicorn exited {gunicorn.returncode} before listening")
        if time.monotonic() > deadline:
            gunicorn.kill()
            die(f"gunicorn did not listen on {path} within {timeout:.0f} s")
        time.sleep(0.1)


def stop(children: dict[str, subprocess.Popen]) -> None:
    graceful = {"nginx": signal.SIGQUIT, "gunicorn": signal.SIGTERM}
    for name, proc in children.items():
        if proc.poll() is None:
            proc.send_signal(graceful[name])
    deadline = time.monotonic() + STOP_GRACE
    for proc in children.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="0.0.0.0", help="the address nginx listens on")  # noqa: S104
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    args = parser.parse_args()

    settings = load_settings()
    ensure_nginx()  # only once the settings are right: nothing is installed for a run that refuses
    nginx = nginx_binary()
    prefix, sock = prepare(settings, args.host, args.port)
    nginx_argv = [nginx, "-p", str(prefix), "-c", "nginx.conf", "-e", "stderr"]
    checked = subprocess.run([*nginx_argv, "-t", "-q"], capture_output=True, text=True, check=False)
    if checked.returncode:
        die(f"nginx refused its configuration {prefix / 'nginx.conf'}:\n{checked.stderr.strip()}")
    manage("migrate", "--noinput", "-v0")
    if "gateway" in settings.DATABASES:  # the fake card gateway's ledger (FAKE_GATEWAY), if it is installed
        manage("migrate", "--database", "gateway", "--noinput", "-v0")
    manage("collectstatic", "--noinput", "-v0")
    sock.unlink(missing_ok=True)

    stopping = False

    def on_signal(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    children = {
        "gunicorn": spawn(
            [
                *(sys.executable, "-m", "gunicorn", "config.wsgi", "-c", "service_platform/gunicorn.conf.py"),
                *("--bind", f"unix:{sock}"),
                # nginx logs every request with the client's address; gunicorn would log none.
                *("--access-logfile", "/dev/null"),
                # Above nginx's own limits (4 KiB lines): whatever nginx passes, gunicorn takes.
                *("--limit-request-line", "8190", "--limit-request-field_size", "8190"),
            ],
            gunicorn_env(prefix),
        )
    }
    try:
        wait_for_socket(sock, children["gunicorn"])
        children["nginx"] = spawn(nginx_argv)
        print(f"  make serve: nginx on http://{args.host}:{args.port}/ in front of gunicorn ({sock})", flush=True)
        print(f"  access log: {prefix / 'log' / 'nginx-access.log'}", flush=True)
        while not stopping:
            if dead := [name for name, proc in children.items() if proc.poll() is not None]:
                print(f"make serve: {dead[0]} exited {children[dead[0]].returncode}; stopping", file=sys.stderr)
                return 1
            time.sleep(0.2)
        return 0
    finally:
        stop(children)


if __name__ == "__main__":
    sys.exit(main())
