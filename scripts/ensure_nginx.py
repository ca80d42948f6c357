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
import sys
from pathlib import Path

from debian_packages import DebianPackage, install  # a sibling: run as a script, scripts/ is on sys.path

BINARY = "/usr/sbin/nginx"
PACKAGED_PID_FILE = Path("/run/nginx.pid")  # Debian's /etc/nginx/nginx.conf says so


def nginx_binary() -> str | None:
    return shutil.which("nginx") or (BINARY if os.access(BINARY, os.X_OK) else None)


def packaged_daemon() -> list[int]:
    """The package's own nginx master, if it runs: the one its pid file names."""
    try:
        pid = int(PACKAGED_PID_FILE.read_text().strip())
        return [pid] if os.readlink(f"/proc/{pid}/exe").split(" ")[0] == BINARY else []
    except (OSError, ValueError):
        return []


NGINX = DebianPackage(
    name="nginx",
    how_to="As root: apt-get install -y nginx (then stop its service: service nginx stop)",
    not_root="nginx is missing and only root can install it.",
    still_running="the packaged nginx is still running (pid {pids[0]}); stop it by hand",
    daemon_pids=packaged_daemon,
    graceful=signal.SIGQUIT,  # nginx's graceful shutdown (SIGTERM is its fast one)
)


def main() -> int:
    if nginx_binary() is None:
        install(NGINX)
        if nginx_binary() is None:
            sys.exit(f"nginx is installed but there is no nginx binary on PATH or at {BINARY}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
