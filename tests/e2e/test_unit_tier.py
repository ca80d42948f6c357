"""`make test-unit` needs nothing but the venv: it passes with the database and the broker pointed at
a port that records every connection made to it, and none is made.

It runs as a background job, a CI step or ``nohup`` starts it: with SIGQUIT and SIGINT ignored, which every
child inherits (a test that relies on a signal resets it in its child).
"""

import os
import re
import subprocess

from faultlib.processes import BASE_DIR, free_port
from faultlib.tcp_proxy import SilenceableProxy


def test_make_test_unit_passes_in_the_background_without_touching_the_database_or_the_broker():
    # A silent proxy accepts and counts every connection and answers nothing: a tier that reached
    # for the database or the broker would be counted (and hang, waiting, until the timeout).
    listener = SilenceableProxy(free_port())
    listener.go_silent()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "MAKE", "TEST_", "GATEWAY_DATABASE_URL"))
    }
    env.update(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{listener.port}/shop",
        GATEWAY_DATABASE_URL=f"postgres://postgres@127.0.0.1:{listener.port}/gateway",
        BROKER_URL=f"amqp://guest:guest@127.0.0.1:{listener.port}//",
    )
    try:
        # Bounded for a wait on the listener; its time is not asserted (bench/ holds speed targets).
        result = subprocess.run(
            ["bash", "-c", "trap '' QUIT INT; exec make --no-print-directory test-unit"],
            cwd=BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        listener.close()

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    collected = int(re.search(r"collected (\d+) items", result.stdout).group(1))
    assert re.search(rf"\n=+ {collected} passed in [\d.]+s =+\n", result.stdout), result.stdout[-2000:]
    assert collected >= 75
    assert listener.accepted == 0  # no connection to the database nor the broker
