"""Install a Debian package the project runs (nginx, Prometheus, Alertmanager) when it is missing.

Shared by scripts/ensure_nginx.py and scripts/ensure_prometheus.py. Only root installs (apt-get);
the service the package may start at once is stopped and disabled again, whatever init system (or
none) runs here, because the project runs its own daemon on its own configuration and ports. Each
script keeps what differs: how it finds its binaries, which processes are the packaged daemon,
the signal that stops it gracefully, and its own messages.
"""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DebianPackage:
    name: str
    how_to: str  # the commands to run by hand, ending every refusal
    not_root: str  # why only root can go on (then ``how_to``)
    still_running: str  # the packaged daemon outlived SIGKILL: formatted with ``pids``, a list
    daemon_pids: Callable[[], list[int]]  # the packaged daemon's processes, only those
    graceful: signal.Signals = signal.SIGTERM  # what asks that daemon to finish and exit
    apt_options: tuple[str, ...] = ()


def install(package: DebianPackage) -> None:
    """apt-get install the package (once more after ``apt-get update`` if that fails), then stop its service."""
    if os.geteuid() != 0:
        sys.exit(f"{package.not_root} {package.how_to}")
    print(f"installing Debian's {package.name} package (apt-get install {package.name})", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "-q", *package.apt_options, package.name]
    try:
        if subprocess.run(command, env=env, capture_output=True, check=False).returncode:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                sys.exit(f"apt-get install {package.name} failed:\n{done.stdout}{done.stderr}\n{package.how_to}")
    finally:  # a half-done install may have started the service too
        stop_packaged_service(package)


def stop_packaged_service(package: DebianPackage) -> None:
    """Stop and disable the service the package set up, and end its daemon if no init system did."""
    disable_service(package.name)
    left = end_daemon(package.daemon_pids, package.graceful)
    if left:
        sys.exit(package.still_running.format(pids=left))


def quiet(*argv: str) -> None:
    subprocess.run(argv, capture_output=True, check=False)


def disable_service(name: str) -> None:
    if Path("/run/systemd/system").is_dir():
        quiet("systemctl", "disable", "--now", name)
    else:
        quiet("systemctl", "disable", name)  # works offline: removes the unit's symlinks
        quiet("update-rc.d", name, "disable")
        quiet("service", name, "stop")


def end_daemon(daemon_pids: Callable[[], list[int]], graceful: signal.Signals) -> list[int]:
    """Signal the daemon's processes (``graceful``, then SIGKILL) until none is left; the pids still there."""
    for sig, grace in ((graceful, 10.0), (signal.SIGKILL, 5.0)):
        pids = daemon_pids()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            time.sleep(0.2)
            pids = daemon_pids()
        if not pids:
            return []
    return daemon_pids()
