"""Field-level encryption: the payload fields a context declares sensitive (``[encrypted]`` in its
context.toml: event type -> field -> the consumers that may read it) are encrypted by ``publish``
before the outbox row is written, so the outbox, the broker, dead letters and the event log hold
only ciphertext; a permitted consumer's handler, schema check and upcasters see the clear value,
any other consumer's the payload without the field.

An encrypted field's value is ``{"$encrypted": {"kid": <key id>, "for": [<consumers>], "ct": <b64>}}``:
AES-256-GCM (the ``cryptography`` library, extra ``[crypto]``), a random 96-bit nonce before the
ciphertext, and the event type, field name and reader list as associated data (a value moved to
another event or field, or a reader added to ``for``, fails authentication). Keys:
``MESSAGING["ENCRYPTION_KEYS"]`` (key id -> base64 of 32 bytes); the last listed encrypts, every
listed one decrypts (rotation: list a new key first in every deployment, then last; drop an old
one once nothing it wrote is kept).
Top-level fields only. An older version whose schema requires such a field (released before it was
declared encrypted) carries it clear: it is written only while ``EVENT_VERSIONS`` pins it for readers
not yet upgraded (docs of the rollout: README, "Encrypted fields"). Fields sealed under a data
subject's own key, for erasure: reliable_messaging._subject_keys.
"""

import base64
import binascii
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from reliable_messaging._conf import setting
from reliable_messaging._declarations import installed
from reliable_messaging._schema_catalog import newest_version, schemas

MARK = "$encrypted"
KEY_BYTES = 32
NONCE_BYTES = 12


class Undecryptable(ValueError):
    """An encrypted field this consumer may read but cannot: a key id not among its keys, a
    malformed value, or a ciphertext that fails authentication (tampered, or moved)."""


class SubjectErased(Undecryptable):
    """A field sealed under a data subject's key that ``erase_subject`` deleted
    (reliable_messaging._subject_keys): the message can never be handled, by any consumer on
    the producer's database."""


def is_encrypted(value: object) -> bool:
    return isinstance(value, dict) and set(value) == {MARK}


def configured_keys() -> dict[str, bytes]:
    """``ENCRYPTION_KEYS`` decoded; ImproperlyConfigured names what is wrong."""
    given = setting("ENCRYPTION_KEYS")
    if not isinstance(given, dict):
        raise ImproperlyConfigured(
            f"MESSAGING['ENCRYPTION_KEYS'] is {type(given).__name__}: give a dict of key id -> base64 of 32 bytes"
        )
    keys = {}
    for kid, encoded in given.items():
        try:
            key = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
        except (binascii.Error, ValueError):
            key = b""
        if not (isinstance(kid, str) and kid) or len(key) != KEY_BYTES:
            raise ImproperlyConfigured(
                f"MESSAGING['ENCRYPTION_KEYS'][{kid!r}]: give a non-empty key id and the base64 of {KEY_BYTES} "
                "random bytes (python -c 'import os, base64; print(base64.b64encode(os.urandom(32)).decode())')"
            )
        keys[kid] = key
    return keys


def sensitive_fields(event_type: str) -> dict[str, tuple[str, ...]]:
    """The fields of ``event_type`` its producer declares encrypted -> the consumers that may read them."""
    return next((d.encrypted.get(event_type, {}) for d in installed() if event_type in d.publishes), {})


def check_encryption() -> None:
    """At start-up: the keys given are usable; and where an installed context declares an
    encrypted or personal field, the ``cryptography`` library is installed, there is a key (it
    wraps the subjects' keys) and the event's newest schema does not require the field."""
    keys = configured_keys()
    declaring = [d.package for d in installed() if d.encrypted or d.personal]
    if not declaring:
        return
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ImproperlyConfigured(
            f"{declaring[0]}/context.toml declares encrypted fields and the cryptography library is missing: "
            "install django-reliable-messaging[crypto]"
        ) from None
    if not keys:
        raise ImproperlyConfigured(
            f"{declaring[0]}/context.toml declares encrypted fields and MESSAGING['ENCRYPTION_KEYS'] is empty: "
            "give key id -> base64 of 32 random bytes (the last listed encrypts)"
        )
    # A consumer that may not read a field gets the payload without it: its schema must allow that.
    # Older versions may require it: they are written (clear) only under a rollout's pin.
    for (event_type, version), schema in schemas().items():
        if version != newest_version(event_type):
            continue
        personal = next((d.personal[event_type].fields for d in installed() if event_type in d.personal), ())
        required = set(schema.schema.get("required", ())) & {*sensitive_fields(event_type), *personal}
        if required:
            raise ImproperlyConfigured(
                f"{schema.path.name} requires {sorted(required)[0]!r}, which its producer encrypts: a consumer that "
                "may not read it receives the payload without it; remove it from the schema's required"
            )


def _associated(event_type: str, field: str, readers: Iterable[str]) -> bytes:
    return json.dumps([event_type, field, list(readers)]).encode()


def encrypt_fields(event_type: str, version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with each declared field present encrypted for its readers, and its personal
    fields under its subject's key (the same payload when ``event_type`` declares none). A field
    that ``version``'s schema requires stays clear: that version's readers predate the declaration
    and cannot do without it."""
    from reliable_messaging._subject_keys import seal_personal

    declared = sensitive_fields(event_type)
    schema = schemas().get((event_type, version))
    required = set(schema.schema.get("required", ())) if schema is not None else set()
    payload = seal_personal(event_type, payload, required)
    present = [field for field in declared if field in payload and field not in required]
    if not present:
        return payload
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    kid, key = list(configured_keys().items())[-1]
    encrypted = dict(payload)
    for field in present:
        readers = sorted(declared[field])
        nonce = os.urandom(NONCE_BYTES)
        clear = json.dumps(payload[field], separators=(",", ":")).encode()
        sealed = AESGCM(key).encrypt(nonce, clear, _associated(event_type, field, readers))
        encrypted[field] = {MARK: {"kid": kid, "for": readers, "ct": base64.b64encode(nonce + sealed).decode()}}
    return encrypted


def without_encrypted(payload: Any) -> Any:
    """``payload`` without its encrypted fields: what its schema can judge without the keys (as a
    consumer that may not read them sees it)."""
    if not isinstance(payload, dict):
        return payload
    return {field: value for field, value in payload.items() if not is_encrypted(value)}


def reveal_for(consumer: str, event_type: str, payload: Any, subject_keys: Mapping[str, Any]) -> Any:
    """``payload`` as ``consumer`` may see it: each encrypted field it is a reader of decrypted,
    each other encrypted field removed; ``Undecryptable`` when a field it may read cannot be,
    ``SubjectErased`` when a personal field's subject was erased. ``subject_keys``: the rows of
    the subject keys its personal fields name (``_subject_keys.subject_keys_of``)."""
    if not isinstance(payload, dict) or not any(is_encrypted(v) for v in payload.values()):
        return payload
    from reliable_messaging._subject_keys import open_personal

    seen = {}
    for field, value in payload.items():
        if not is_encrypted(value):
            seen[field] = value
            continue
        sealed = value[MARK]
        readers = sealed.get("for") if isinstance(sealed, dict) else None
        if not (isinstance(readers, list) and all(isinstance(r, str) for r in readers)):
            raise Undecryptable(f"field {field!r}: a malformed encrypted value (no list of readers)")
        if "sub" in sealed:
            readable, clear = open_personal(consumer, event_type, field, sealed, subject_keys)
            if readable:
                seen[field] = clear
        elif consumer in readers:
            seen[field] = _decrypt(event_type, field, readers, sealed)
    return seen


def _decrypt(event_type: str, field: str, readers: list[str], sealed: dict[str, Any]) -> Any:
    kid, text = sealed.get("kid"), sealed.get("ct")
    keys = configured_keys()
    if kid not in keys:
        raise Undecryptable(
            f"field {field!r}: key id {kid!r} is not in MESSAGING['ENCRYPTION_KEYS'] ({', '.join(keys) or 'none'}): "
            "add it back, then replay this dead letter"
        )
    try:  # a deployment that carries no declaration of encrypted fields may lack the extra
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise Undecryptable(
            f"field {field!r}: the cryptography library is missing: install django-reliable-messaging[crypto], "
            "then replay this dead letter"
        ) from None
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) <= NONCE_BYTES:
        raise Undecryptable(f"field {field!r}: a malformed ciphertext (not base64 of a nonce and a sealed value)")
    try:
        clear = AESGCM(keys[kid]).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _associated(event_type, field, readers))
    except InvalidTag:
        raise Undecryptable(
            f"field {field!r}: the ciphertext fails authentication under key {kid!r} "
            "(tampered with, or moved from another event, field or reader list)"
        ) from None
    return json.loads(clear)
