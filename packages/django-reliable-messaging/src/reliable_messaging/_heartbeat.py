"""AMQP heartbeats while a handler runs.

kombu's consumer runs handlers in the thread that reads the connection, so a slow handler (a
slow remote service, say) would stop the heartbeats and the broker would drop the connection,
then redeliver the message. py-amqp is not thread-safe, so this thread writes a heartbeat
frame only while the consumer thread is inside a handler, which never touches the broker, and
the consumer thread waits for such a write to finish before it talks to the broker again.
"""

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger("reliable_messaging.heartbeat")


class HandlerHeartbeat:
    def __init__(self, amqp_connection: Any, interval: float) -> None:  # py-amqp's connection
        self._connection = amqp_connection
        self._every = max(interval / 3, 0.2)
        self._lock = threading.Lock()
        self._busy_since: float | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="amqp-heartbeat", daemon=True)
        self._thread.start()

    @contextmanager
    def handling(self) -> Iterator[None]:
        with self._lock:
            self._busy_since = time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._busy_since = None

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopped.wait(self._every):
            with self._lock:
                if self._busy_since is None or time.monotonic() - self._busy_since < self._every:
                    continue
                try:
                    self._connection.send_heartbeat()
                except Exception as exc:  # noqa: BLE001 - the consumer thread will see the broken connection
                    logger.debug("heartbeat during a handler failed: %s", exc)
