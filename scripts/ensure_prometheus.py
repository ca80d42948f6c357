#!/usr/bin/env python3
"""Make sure ``promtool`` and ``prometheus`` (Debian's ``prometheus`` package) are installed.

The alert-rule tests (tests/e2e/test_prometheus_rules.py) and the alerting test
(tests/e2e/test_prometheus_alerting.py) run both. Installs the package with apt-get when one is
missing (root only), without its recommended node exporter, and makes sure the daemon the
package may start (``/usr/bin/prometheus`` as the ``prometheus`` user, listening on :9090) is
stopped and disabled again: the tests start their own Prometheus on a free port of 127.0.0.1.
Does nothing when both binaries are there, and never touches a Prometheus it did not install.

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

PACKAGE = "prometheus"
DAEMON = "/usr/bin/prometheus"
HOW_TO = "As root: apt-get install -y --no-install-recommends prometheus (then stop its service)"


def installed() -> bool:
    return bool(shutil.which("promtool") and shutil.which("prometheus"))


def packaged_daemons() -> list[int]:
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
            if entry.stat().st_uid == uid and os.readlink(entry / "exe").split(" ")[0] == DAEMON:
                pids.append(int(entry.name))
        except OSError:  # the process ended meanwhile, or is not ours to read
            continue
    return pids


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
    # Without an init system to ask, end the daemon itself (by pid: only the packaged one).
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        pids = packaged_daemons()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            time.sleep(0.2)
            pids = packaged_daemons()
        if not pids:
            return
    sys.exit(f"the packaged Prometheus daemon is still running (pids {packaged_daemons()}); stop it by hand")


def install() -> None:
    if os.geteuid() != 0:
        sys.exit(f"promtool/prometheus are missing and only root can install them. {HOW_TO}")
    print("installing Debian's prometheus package (apt-get install prometheus)", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # No recommends: prometheus-node-exporter would be one more daemon listening on the host.
    command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", PACKAGE]
    try:
        if subprocess.run(command, env=env, capture_output=True, check=False).returncode:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                sys.exit(f"apt-get install {PACKAGE} failed:\n{done.stdout}{done.stderr}\n{HOW_TO}")
    finally:
        stop_packaged_daemon()
    if not installed():
        sys.exit(f"{PACKAGE} is installed but promtool or prometheus is not on PATH")


def main() -> int:
    if not installed():
        install()
    return 0


if __name__ == "__main__":
    sys.exit(main())
