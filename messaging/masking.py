"""Mask secrets (``SENSITIVE_FIELDS``, payment tokens by default) wherever a payload leaves the
context that owns them."""

import re
from typing import Any

from messaging.conf import setting

MASK = "****"


def mask_value(value: Any) -> str:
    text = str(value)
    prefix, sep, _ = text.partition("_")
    return f"{prefix}{sep}{MASK}" if sep and len(prefix) <= 8 else MASK


def mask_sensitive(data: Any) -> Any:
    """A copy of ``data`` with the value of every sensitive key masked, at any depth."""
    sensitive = set(setting("SENSITIVE_FIELDS"))
    return _mask(data, sensitive)


def _mask(data: Any, sensitive: set[str]) -> Any:
    if isinstance(data, dict):
        return {k: (mask_value(v) if k in sensitive and v else _mask(v, sensitive)) for k, v in data.items()}
    if isinstance(data, list):
        return [_mask(item, sensitive) for item in data]
    return data


def mask_text(text: str) -> str:
    """``text`` with the value after every sensitive key masked (``payment_token='tok_visa'``,
    ``"payment_token": "tok_visa"``), for free text such as errors and tracebacks."""
    for name in setting("SENSITIVE_FIELDS"):
        pattern = re.compile(rf"""(['"]?{re.escape(name)}['"]?\s*[:=]\s*['"]?)([^'"\s,;}}\]\)]+)""")
        text = pattern.sub(lambda m: m.group(1) + mask_value(m.group(2)), text)
    return text
