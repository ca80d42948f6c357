"""Mask secrets (the payload keys in ``SENSITIVE_FIELDS``) wherever a payload leaves the context
that owns them."""

import re
from typing import Any

from reliable_messaging._conf import setting
from reliable_messaging._field_crypto import MARK, is_encrypted

MASK = "****"
# A token's kind, shown before the mask (a prefix such as ``tok_`` or ``key_``): a few ASCII letters only,
# so no part of a free-text secret ("my secret_x", "a b_SECRET") is ever shown.
_SHOWN_PREFIX = re.compile(r"[A-Za-z]{1,8}_")


def mask_value(value: Any) -> str:
    prefix = _SHOWN_PREFIX.match(str(value))
    return f"{prefix.group()}{MASK}" if prefix else MASK


def shown_encrypted(value: dict[str, Any]) -> str:
    """How an encrypted field's value is shown: ``encrypted for <readers> (key <id>)``; a personal
    field's ``erased (subject key <id>)`` once its subject is erased."""
    sealed = value[MARK] if isinstance(value[MARK], dict) else {}
    readers = sealed.get("for")
    readers = ", ".join(map(str, readers)) if isinstance(readers, list) else "?"
    if "sub" in sealed:
        from reliable_messaging._subject_keys import is_erased

        if is_erased(sealed["sub"]):
            return f"erased (subject key {sealed['sub']})"
        return f"encrypted for {readers or 'no consumer'} (subject key {sealed['sub']})"
    return f"encrypted for {readers} (key {sealed.get('kid', '?')})"


def mask_sensitive(data: Any, *, keep_encrypted: bool = False) -> Any:
    """A copy of ``data`` with the value of every sensitive key masked, at any depth, and each
    encrypted field's value shown as ``encrypted for ...`` (``keep_encrypted``: kept as it is)."""
    sensitive = set(setting("SENSITIVE_FIELDS"))
    return _mask(data, sensitive, keep_encrypted)


def _mask(data: Any, sensitive: set[str], keep_encrypted: bool) -> Any:
    if is_encrypted(data):
        return data if keep_encrypted else shown_encrypted(data)
    if isinstance(data, dict):
        return {
            k: (mask_value(v) if k in sensitive and v else _mask(v, sensitive, keep_encrypted)) for k, v in data.items()
        }
    if isinstance(data, list):
        return [_mask(item, sensitive, keep_encrypted) for item in data]
    return data


def _text_pattern(name: str) -> re.Pattern[str]:
    # A quoted value runs to its closing quote (escaped quotes included), spaces and all; an
    # unquoted one to the next delimiter or the end of the line, so a token with a space
    # (``tok_a b_SECRET``) is masked whole: over-masking a word beats showing half a secret.
    return re.compile(
        rf"""(['"]?{re.escape(name)}['"]?\s*[:=]\s*)"""
        r"""(?:(?P<quote>['"])(?P<quoted>(?:\\.|(?!(?P=quote))[^\\\n])*)(?P=quote)"""
        r"""|(?P<bare>[^'"\n,;}\])]*[^'"\s,;}\])]))"""
    )


def mask_text(text: str) -> str:
    """``text`` with the value after every sensitive key masked (``api_key='key_abc'``,
    ``"api_key": "key_abc"``), for free text such as errors and tracebacks."""

    def masked(match: re.Match[str]) -> str:
        if match.group("quote"):
            quote = match.group("quote")
            return f"{match.group(1)}{quote}{mask_value(match.group('quoted'))}{quote}"
        return f"{match.group(1)}{mask_value(match.group('bare'))}"

    for name in setting("SENSITIVE_FIELDS"):
        text = _text_pattern(name).sub(masked, text)
    return text
