"""A RabbitMQ memory alarm, raised and always cleared: the broker blocks every publisher.

The alarm is node-wide (every vhost), so the watermark is put back in a ``finally``, to the
value it had before.
"""

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.processes import wait_until


def _rabbitmqctl(*args: str) -> str:
    result = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=60, check=False)
    if result.returncode:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)} failed: {result.stderr or result.stdout}")
    return result.stdout.strip()


def _watermark() -> float:
    value = _rabbitmqctl("eval", "vm_memory_monitor:get_vm_memory_high_watermark().")
    return float(value)  # a relative watermark; an absolute one ({absolute, N}) fails here, before any change


def _alarmed() -> bool:
    return _rabbitmqctl("eval", "rabbit_alarm:get_alarms().") != "[]"


@contextmanager
def memory_alarm() -> Iterator[None]:
    original = _watermark()
    try:
        _rabbitmqctl("set_vm_memory_high_watermark", "0.000001")
        wait_until(_alarmed, timeout=30, message="the memory alarm raised")
        yield
    finally:
        _rabbitmqctl("set_vm_memory_high_watermark", str(original))
        wait_until(lambda: not _alarmed(), timeout=60, message="the memory alarm cleared")
