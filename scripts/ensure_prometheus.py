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
import sys
from functools import partial
from pathlib import Path

from debian_packages import DebianPackage, install  # a sibling: run as a script, scripts/ is on sys.path

# package -> (the binaries the tests run, the daemon its service starts)
PACKAGES = {
    "prometheus": (("prometheus", "promtool"), "/usr/bin/prometheus"),
    "prometheus-alertmanager": (("prometheus-alertmanager", "amtool"), "/usr/bin/prometheus-alertmanager"),
}


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


def debian_package(package: str) -> DebianPackage:
    binaries, daemon = PACKAGES[package]
    return DebianPackage(
        name=package,
        how_to=f"As root: apt-get install -y --no-install-recommends {package} (then stop its service)",
        not_root=f"{'/'.join(binaries)} missing and only root can install them.",
        still_running=f"the packaged {daemon} is still running (pids {{pids}}); stop it by hand",
        daemon_pids=partial(packaged_daemons, daemon),
        # No recommends: prometheus-node-exporter would be one more daemon listening on the host.
        apt_options=("--no-install-recommends",),
    )


def main() -> int:
    for package in PACKAGES:
        if not installed(package):
            install(debian_package(package))
            if not installed(package):
                sys.exit(f"{package} is installed but one of {', '.join(PACKAGES[package][0])} is not on PATH")
    return 0


if __name__ == "__main__":
    sys.exit(main())
