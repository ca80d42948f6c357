"""Parse durations such as ``300``, ``90s``, ``15m``, ``24h`` or ``7d`` from settings."""

import re

_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(value: str | int | float) -> float:
    """Return the duration in seconds; a bare number means seconds."""
    if isinstance(value, int | float):
        return float(value)
    match = _PATTERN.match(value)
    if not match:
        raise ValueError(f"not a duration: {value!r} (use e.g. 300, 90s, 15m, 24h, 7d)")
    number, unit = match.groups()
    return float(number) * _UNITS[unit]
