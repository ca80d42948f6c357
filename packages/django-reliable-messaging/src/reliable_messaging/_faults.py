"""Named points where crash tests stop a process, to SIGKILL it exactly there.

Inactive unless the environment names the point (``FAULT_POINT``): then the process writes
its pid to ``FAULT_MARKER`` on reaching it and waits to be killed. Production never sets it.
"""

import os
import time
from pathlib import Path

_POINT = os.environ.get("FAULT_POINT", "")
_MARKER = os.environ.get("FAULT_MARKER", "")


def fault_point(name: str) -> None:
    if _POINT != name:
        return
    if _MARKER:
        Path(_MARKER).write_text(str(os.getpid()))
    while True:  # the test kills us here
        time.sleep(1)
