#!/usr/bin/env python3
"""Make sure Prometheus and Alertmanager (Debian's ``prometheus`` and ``prometheus-alertmanager``
packages) are installed: ``prometheus``, ``promtool``, ``prometheus-alertmanager`` and ``amtool``.

The alert-rule tests (tests/e2e/test_prometheus_rules.py, tests/e2e/test_alertmanager.py) and the
alerting tests (tests/e2e/test_prometheus_alerting.py) run them. Installs a package with apt-get
when one of its binaries is missing (root only), without recommends (the node exporter), and
makes sure the daemon the package may start (``/usr/bin/prometheus`` on :9090,
``/usr/bin/prometheus-alertmanager`` on :9093, as the ``prometheus`` user) is stopped and
disabled again: the tests start their own on free ports of 127.0.0.1. Does nothing when every
binary is there, and never touches a daemon it did not install.

Usage: scripts/ensure_prometheus.py
"""

import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

# package -> (the binaries the tests run, the daemon its service starts)
PACKAGES = {
    "prometheus": (("prometheus", "promtool"), "/usr/bin/prometheus"),
    "prometheus-alertmanager": (("prometheus-alertmanager", "amtool"), "/usr/bin/prometheus-alertmanager"),
}
HOW_TO = "As root: apt-get install -y --no-install-recommends {package} (then stop its service)"


def installed(package: str) -> bool:
    binaries, _ = PACKAGES[package]
    return all(shutil.which(binary) for binary in binaries)


def packaged_daemons(daemon: str) -> list[int]:
    """Pids of the package's daemon: the packaged binary running as the ``prometheus`` system user."""
    try:
        uid = pwd.getpwnam("prometheus").pw_uid
    except KeyError:
        return []
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # "(deleted)" follows the path when the binary was replaced under a running daemon.
            if entry.stat().st_uid == uid and os.readlink(entry / "exe").split(" ")[0] == daemon:
                pids.append(int(entry.name))
        except OSError:  # the process ended meanwhile, or is not ours to read
            continue
    return pids


def quiet(*argv: str) -> None:
    subprocess.run(argv, capture_output=True, check=False)


def stop_packaged_daemon(package: str) -> None:
    """Stop and disable the service the package set up, whatever init system (or none) runs here."""
    _, daemon = PACKAGES[package]
    if Path("/run/systemd/system").is_dir():
        quiet("systemctl", "disable", "--now", package)
    else:
        quiet("systemctl", "disable", package)  # works offline: removes the unit's symlinks
        quiet("update-rc.d", package, "disable")
        quiet("service", package, "stop")
    # Without an init system to ask, end the daemon itself (by pid: only the packaged one).
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        pids = packaged_daemons(daemon)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            time.sleep(0.2)
            pids = packaged_daemons(daemon)
        if not pids:
            return
    sys.exit(f"the packaged {daemon} is still running (pids {packaged_daemons(daemon)}); stop it by hand")


def install(package: str) -> None:
    how_to = HOW_TO.format(package=package)
    if os.geteuid() != 0:
        sys.exit(f"{'/'.join(PACKAGES[package][0])} missing and only root can install them. {how_to}")
    print(f"installing Debian's {package} package (apt-get install {package})", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # No recommends: prometheus-node-exporter would be one more daemon listening on the host.
    command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    try:
        if subprocess.run(command, env=env, capture_output=True, check=False).returncode:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                sys.exit(f"apt-get install {package} failed:\n{done.stdout}{done.stderr}\n{how_to}")
    finally:
        stop_packaged_daemon(package)
    if not installed(package):
        sys.exit(f"{package} is installed but one of {', '.join(PACKAGES[package][0])} is not on PATH")


def main() -> int:
    for package in PACKAGES:
        if not installed(package):
            install(package)
    return 0


if __name__ == "__main__":
    sys.exit(main())
