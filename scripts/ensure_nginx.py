#!/usr/bin/env python3
"""Make sure ``nginx`` (Debian's ``nginx`` package) is installed, for ``make serve`` and its tests.

Installs the package with apt-get when the binary is missing (root only) and makes sure the
service the package may start (the default site on port 80, pid in ``/run/nginx.pid``) is
stopped and disabled again: ``make serve`` runs its own nginx in the foreground with the
configuration of ``deploy/nginx/``. Does nothing when nginx is there, and never touches an nginx
it did not install, nor anything under ``/etc/nginx``.

Usage: scripts/ensure_nginx.py
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

PACKAGE = "nginx"
BINARY = "/usr/sbin/nginx"
PACKAGED_PID_FILE = Path("/run/nginx.pid")  # Debian's /etc/nginx/nginx.conf says so
HOW_TO = "As root: apt-get install -y nginx (then stop its service: service nginx stop)"


def nginx_binary() -> str | None:
    return shutil.which("nginx") or (BINARY if os.access(BINARY, os.X_OK) else None)


def packaged_daemon() -> int | None:
    """The pid of the package's own nginx master, if it runs: the one its pid file names."""
    try:
        pid = int(PACKAGED_PID_FILE.read_text().strip())
        return pid if os.readlink(f"/proc/{pid}/exe").split(" ")[0] == BINARY else None
    except (OSError, ValueError):
        return None


def quiet(*argv: str) -> None:
    subprocess.run(argv, capture_output=True, check=False)


def stop_packaged_daemon() -> None:
    """Stop and disable the service the package set up, whatever init system (or none) runs here."""
    if Path("/run/systemd/system").is_dir():
        quiet("systemctl", "disable", "--now", PACKAGE)
    else:
        quiet("systemctl", "disable", PACKAGE)  # works offline: removes the unit's symlinks
        quiet("update-rc.d", PACKAGE, "disable")
        quiet("service", PACKAGE, "stop")
    # Without an init system to ask, end the master itself (by its pid file: only the packaged one).
    for sig, grace in ((signal.SIGQUIT, 10.0), (signal.SIGKILL, 5.0)):
        pid = packaged_daemon()
        if pid is None:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while packaged_daemon() is not None and time.monotonic() < deadline:
            time.sleep(0.2)
    if packaged_daemon() is not None:
        sys.exit(f"the packaged nginx is still running (pid {packaged_daemon()}); stop it by hand")


def install() -> None:
    if os.geteuid() != 0:
        sys.exit(f"nginx is missing and only root can install it. {HOW_TO}")
    print("installing Debian's nginx package (apt-get install nginx)", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "-q", PACKAGE]
    try:
        if subprocess.run(command, env=env, capture_output=True, check=False).returncode:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                sys.exit(f"apt-get install {PACKAGE} failed:\n{done.stdout}{done.stderr}\n{HOW_TO}")
    finally:
        stop_packaged_daemon()
    if nginx_binary() is None:
        sys.exit(f"{PACKAGE} is installed but there is no nginx binary on PATH or at {BINARY}")


def main() -> int:
    if nginx_binary() is None:
        install()
    return 0


if __name__ == "__main__":
    sys.exit(main())
