"""Ports for a test's own clusters.

They are taken below the kernel's ephemeral range: a port in it can be the local end of any outgoing
connection of a busy machine (hundreds during the suite) between the check and the server's bind,
and a node whose listener cannot bind dies at boot. Free means bindable, which also sees those ends.
"""

import random
import socket
from collections.abc import Callable
from pathlib import Path

RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_low() -> int:
    try:
        return int(RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def bindable(port: int) -> bool:
    """Not only unheard: the local end of an open connection refuses a listener as surely as a listener."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base(rng: random.Random, low: int, high: int, ports: Callable[[int], list[int]]) -> int:
    """A base in [low, high) whose ``ports(base)`` are all bindable and below the ephemeral range."""
    ceiling = ephemeral_low()
    for _ in range(50):
        base = rng.randrange(low, high)
        wanted = ports(base)
        if max(wanted) < ceiling and all(bindable(p) for p in wanted):
            return base
    raise RuntimeError(f"no free ports for a test cluster in [{low}, {high}) below {ceiling}")
