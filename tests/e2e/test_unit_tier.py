"""`make test-unit` needs nothing but the venv: it passes with the database and the broker unreachable.

It runs as a background job, a CI step or ``nohup`` starts it: with SIGQUIT and SIGINT ignored, which every
child inherits (a test that relies on a signal resets it in its child).
"""

import os
import re
import subprocess
import time

from faultlib.processes import BASE_DIR, free_port


def test_make_test_unit_passes_in_seconds_in_the_background_with_the_database_and_the_broker_unreachable():
    closed = free_port()  # nothing listens there: connecting to it is what a stopped service looks like
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "MAKE", "TEST_", "GATEWAY_DATABASE_URL"))
    }
    env.update(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed}/shop",
        GATEWAY_DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed}/gateway",
        BROKER_URL=f"amqp://guest:guest@127.0.0.1:{closed}//",
    )
    started = time.monotonic()
    result = subprocess.run(
        ["bash", "-c", "trap '' QUIT INT; exec make --no-print-directory test-unit"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    seconds = time.monotonic() - started

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    collected = int(re.search(r"collected (\d+) items", result.stdout).group(1))
    assert re.search(rf"\n=+ {collected} passed in [\d.]+s =+\n", result.stdout), result.stdout[-2000:]
    assert collected >= 75
    # Not a speed target (bench/ has those): well under the 60 s a wait on a closed port's connect
    # would add, with room for a busy machine (31.8 s in a loaded run).
    assert seconds < 50
