"""scripts/debian_packages.py: the daemon a package started is ended, with its graceful signal first."""

import resource
import signal
import subprocess
import sys

from scripts.debian_packages import end_daemon


def as_a_daemon_starts() -> None:
    """SIGQUIT's default action, without its core file (none may land in the working tree).

    A child inherits ignored signals: started from a background job, ``nohup`` or a CI step, SIGQUIT would
    be ignored and the graceful signal never end it. A daemon sets its own handlers; this one resets it.
    """
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def test_a_running_daemon_is_ended_by_its_graceful_signal():
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=as_a_daemon_starts)

    left = end_daemon(lambda: [] if daemon.poll() is not None else [daemon.pid], signal.SIGQUIT)

    assert left == []
    assert daemon.returncode == -signal.SIGQUIT


def test_no_daemon_is_asked_for_once_and_nothing_is_signalled():
    asked = []

    left = end_daemon(lambda: asked.append(1) or [], signal.SIGTERM)

    assert left == []
    assert asked == [1]
