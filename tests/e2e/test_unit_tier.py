"""`make test-unit` needs nothing but the venv: it passes with the database and the broker pointed at
a port that records every connection made to it, and none is made.

It runs as a background job, a CI step or ``nohup`` starts it: with SIGQUIT and SIGINT ignored, which every
child inherits (a test that relies on a signal resets it in its child).
"""

import os
import re
import socket
import subprocess
import threading

from faultlib.processes import BASE_DIR


class Listener:
    """A port that accepts and keeps every connection, answering nothing: a tier that reached for
    the database or the broker would be counted (and, waiting for an answer, hang until the timeout)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.done.is_set():
            try:
                self.accepted.append(self.sock.accept()[0])
            except TimeoutError:
                continue

    def close(self) -> None:
        self.done.set()
        self.thread.join(5)
        for conn in [*self.accepted, self.sock]:
            conn.close()


def test_make_test_unit_passes_in_the_background_without_touching_the_database_or_the_broker():
    listener = Listener()
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
    assert len(listener.accepted) == 0  # no connection to the database nor the broker
