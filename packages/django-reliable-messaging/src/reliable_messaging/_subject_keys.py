"""Erasure by crypto-shredding: the fields a context declares personal (``[personal."<event
type>"]`` in its context.toml: ``subject``, the field naming whose data it is; ``fields``, sealed
under that subject's own key; ``readers``, the consumers that may read them) are encrypted by
``publish`` under a key of their subject's, so the outbox, the broker, dead letters and the event
log hold only ciphertext. ``erase_subject(subject)`` deletes the subject's keys: every copy of
what they sealed, wherever it lies, can no longer be read, and a consumer on the producer's
database receiving such a message (a redelivery, a replay) refuses it with the reason
``subject_erased``.

A subject key is created by the first ``publish`` about its subject (``messaging_subject_key``,
in the publisher's transaction), stored sealed under the newest of ``ENCRYPTION_KEYS`` and found
by an HMAC of the subject under each listed key: the table never holds a subject in clear. An
erased key keeps its id (no personal data), so a message naming it is known as erased. A reader
decrypts with the keys of its own database: where it is deployed apart from the producer, it is
not a reader (README, "Erasing a data subject").

A sealed personal field is ``{"$encrypted": {"sub": <subject key id>, "for": [<readers>], "ct":
<b64>}}``: AES-256-GCM, a random nonce before the ciphertext, event type, field and readers as
associated data, as reliable_messaging._field_crypto seals a field under a configured key.
"""

import base64
import hashlib
import hmac
import json
import os
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from reliable_messaging._declarations import Personal, installed
from reliable_messaging._field_crypto import MARK, SubjectErased, Undecryptable, configured_keys, is_encrypted
from reliable_messaging._sql import insert_rows
from reliable_messaging.models import SubjectKey

NONCE_BYTES = 12


def personal_of(event_type: str) -> Personal | None:
    """What ``event_type``'s producer declares personal, if anything."""
    return next((d.personal.get(event_type) for d in installed() if event_type in d.publishes), None)


def _digests(subject: str) -> list[str]:
    return [hmac.new(key, subject.encode(), hashlib.sha256).hexdigest() for key in configured_keys().values()]


def _aead(key: bytes) -> Any:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


def subject_key(subject: str) -> tuple[str, bytes]:
    """The id and key of ``subject``'s key, created if it has none: inside the caller's transaction,
    so a rolled-back publish leaves none; concurrent first publishes about one subject share one."""
    digests = _digests(subject)
    row = _key_of(digests)
    if row is None:
        wrap_kid, wrapping = list(configured_keys().items())[-1]
        key_id, key, nonce = f"subject-{uuid.uuid4().hex}", os.urandom(32), os.urandom(NONCE_BYTES)
        wrapped = base64.b64encode(nonce + _aead(wrapping).encrypt(nonce, key, key_id.encode())).decode()
        new: dict[str, Any] = {"key_id": key_id, "subject_digest": digests[-1], "wrapped": wrapped}
        new |= {"wrap_kid": wrap_kid, "created_at": timezone.now()}
        # On a concurrent insert of the same digest, waits for it and keeps the other's key.
        if insert_rows(SubjectKey, [new], ignore_conflict_on=("subject_digest",), returning="key_id"):
            return key_id, key
        # The other transaction's, committed (the insert waited for it), unless erased meanwhile.
        if (row := _key_of(digests)) is None:
            raise SubjectErased(f"the subject's key was erased while this publish made one ({key_id})")
    key_id, wrap_kid, wrapped = row
    return key_id, _unwrap(key_id, wrap_kid, wrapped)


def _key_of(digests: list[str]) -> tuple[str, str, str] | None:
    """(key id, wrap_kid, wrapped) of the key found by one of ``digests``. A plain statement: it runs
    on every publish about a subject (every checkout), where the ORM's compiling of it cost as
    much as the database's answer."""
    marks = ", ".join(["%s"] * len(digests))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT key_id, wrap_kid, wrapped FROM {SubjectKey._meta.db_table} WHERE subject_digest IN ({marks})",
            digests,
        )
        found = cursor.fetchone()
    return (found[0], found[1], found[2]) if found else None


def _unwrap(key_id: str, wrap_kid: str, wrapped: str) -> bytes:
    configured = configured_keys()
    if wrap_kid not in configured:
        raise Undecryptable(
            f"subject key {key_id!r} is sealed under key id {wrap_kid!r}, "
            "not in MESSAGING['ENCRYPTION_KEYS']: add it back"
        )
    raw = base64.b64decode(wrapped)
    return bytes(_aead(configured[wrap_kid]).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], key_id.encode()))


def _associated(event_type: str, field: str, readers: list[str]) -> bytes:
    return json.dumps([event_type, field, readers]).encode()


def seal_personal(event_type: str, payload: dict[str, Any], required: set[str]) -> dict[str, Any]:
    """``payload`` with its declared personal fields sealed under its subject's key (the same
    payload when it has none, or no subject). A field ``required`` stays clear: the version's
    readers predate the declaration and cannot do without it."""
    declared = personal_of(event_type)
    if declared is None:
        return payload
    present = [field for field in declared.fields if field in payload and field not in required]
    subject = payload.get(declared.subject)
    if not present or not isinstance(subject, str) or not subject:
        return payload
    key_id, key = subject_key(subject)
    readers = list(declared.readers)
    sealed = dict(payload)
    for field in present:
        nonce = os.urandom(NONCE_BYTES)
        clear = json.dumps(payload[field], separators=(",", ":")).encode()
        text = _aead(key).encrypt(nonce, clear, _associated(event_type, field, readers))
        sealed[field] = {MARK: {"sub": key_id, "for": readers, "ct": base64.b64encode(nonce + text).decode()}}
    return sealed


def subject_keys_of(payloads: Iterable[Any]) -> dict[str, SubjectKey]:
    """The subject keys, by id, that the personal fields of ``payloads`` are sealed under: one query
    for them all (none when no field is), in the caller's transaction."""
    named = {
        value[MARK].get("sub")
        for payload in payloads
        if isinstance(payload, dict)
        for value in payload.values()
        if is_encrypted(value) and isinstance(value[MARK], dict)
    }
    key_ids = [key_id for key_id in named if isinstance(key_id, str)]
    return {row.key_id: row for row in SubjectKey.objects.filter(key_id__in=key_ids)} if key_ids else {}


def open_personal(
    consumer: str, event_type: str, field: str, sealed: dict[str, Any], keys: Mapping[str, SubjectKey]
) -> tuple[bool, Any]:
    """(whether ``consumer`` may read it, the clear value if so) of a field sealed under a subject
    key, one of ``keys`` (``subject_keys_of``) if this database has it; ``SubjectErased`` for any
    consumer once the key is erased here, ``Undecryptable`` for a reader whose database lacks the
    key or whose ciphertext fails authentication."""
    key_id, readers = sealed.get("sub"), sealed.get("for")
    row = keys.get(key_id) if isinstance(key_id, str) else None
    if row is not None and row.erased_at is not None:
        raise SubjectErased(
            f"field {field!r}: subject erased (its key {key_id} was deleted on {row.erased_at:%Y-%m-%d %H:%M:%S} UTC): "
            "this message can never be handled; purge it"
        )
    if not isinstance(readers, list) or consumer not in readers:
        return False, None
    if row is None:
        raise Undecryptable(
            f"field {field!r}: subject key {key_id!r} is not in this database: the reader must share it"
        )
    from cryptography.exceptions import InvalidTag

    key = _unwrap(row.key_id, row.wrap_kid, row.wrapped)
    try:
        raw = base64.b64decode(str(sealed.get("ct")), validate=True)
        clear = _aead(key).decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], _associated(event_type, field, readers))
    except (InvalidTag, ValueError):  # binascii.Error is a ValueError
        raise Undecryptable(
            f"field {field!r}: the ciphertext fails authentication under subject key {key_id!r}"
        ) from None
    return True, json.loads(clear)


def is_erased(key_id: object) -> bool:
    return isinstance(key_id, str) and SubjectKey.objects.filter(key_id=key_id, erased_at__isnull=False).exists()


def erase_subject(subject: str) -> int:
    """Delete ``subject``'s keys (one per configured key it was first published under): what they
    sealed can no longer be read anywhere. Return how many were erased; 0 for a subject never
    published about, or erased already."""
    with transaction.atomic():
        return SubjectKey.objects.filter(subject_digest__in=_digests(subject)).update(
            subject_digest=None, wrapped="", wrap_kid="", erased_at=timezone.now()
        )
