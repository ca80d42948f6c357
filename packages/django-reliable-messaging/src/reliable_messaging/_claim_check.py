"""The claim check: a payload over ``CLAIM_CHECK_BYTES`` travels apart from its message.

The outbox row keeps the whole payload (``publish()`` writes it in the caller's transaction and
waits on nothing). The relay stores it before publishing, outside its claim transaction (a slow
storage never holds the batch's row locks, nor outlasts the relay's idle-in-transaction limit),
under ``<event type>/<message id>.<random>.json`` in the storage ``CLAIM_CHECK_STORAGE`` names (a
name no other write takes: a relay never finds another's copy half written); the message then
carries ``{}`` as its body and the header ``x-claim-check``: ``{"key", "size", "sha256"}``.

A consumer fetches the payload before its transaction (``parse_incoming``) and refuses, as a dead
letter, a reference that is not the one the relay writes for that message (another message's key,
a path outside the namespace), larger than ``CLAIM_CHECK_MAX_BYTES``, or whose bytes differ in
size or sha256. The handler sees the payload as if it had travelled inline.

Retention: a stored payload is kept while an outbox row or a dead letter of this database refers
to it (``sweep``, run by the housekeeping with the purge).
"""

import hashlib
import logging
import re
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage, storages

from reliable_messaging._conf import claim_check_limits, max_message_bytes, setting
from reliable_messaging._edge import InvalidMessage

if TYPE_CHECKING:
    from reliable_messaging._envelope import IncomingEvent

logger = logging.getLogger("reliable_messaging.claim_check")

HEADER = "x-claim-check"
# The body of a message whose payload is stored apart: still a JSON object.
BODY = b"{}"
# Where the bus keeps stored payloads when CLAIM_CHECK_STORAGE names no storage (relative to the
# working directory, like the embedded broker's folder: every process of the project shares it).
DEFAULT_DIR = "var/claim-check"
# The id a replay published as a new message names (reliable_messaging._dead_letters).
REPLAY_OF_HEADER = "x-replay-of"
# <message id>.<random>.json: the name of a stored payload in its event type's folder.
_STORED_NAME = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.[0-9a-f]{32}\.json")


class StorageUnavailable(InvalidMessage):
    """The storage did not give a payload (a network or permission error): no fault of the message.
    A dead letter ``claim_check_unavailable`` like any ``InvalidMessage``, unless the consumer
    retries it: ``event`` is the message, its payload not fetched (``parse_incoming`` sets it)."""

    event: "IncomingEvent | None" = None

    def __init__(self, detail: str):
        super().__init__("claim_check_unavailable", detail)


def storage() -> Storage:
    alias = setting("CLAIM_CHECK_STORAGE")
    if alias is None:
        return FileSystemStorage(location=Path(DEFAULT_DIR).resolve())
    return storages[alias]


def stored_apart(body: bytes) -> bool:
    """Whether a message body this large travels apart (``CLAIM_CHECK_BYTES``; None: never)."""
    threshold, _ = claim_check_limits()
    return threshold is not None and len(body) > threshold


def payload_limit() -> tuple[str, int]:
    """The setting that bounds a payload ``publish()`` writes, and its bytes: ``CLAIM_CHECK_MAX_BYTES``
    with claim checks on, else ``MAX_MESSAGE_BYTES`` (for ``_contracts.publish_refusal``)."""
    threshold, largest = claim_check_limits()
    return ("MAX_MESSAGE_BYTES", max_message_bytes()) if threshold is None else ("CLAIM_CHECK_MAX_BYTES", largest)


def store(event_type: str, message_id: str, body: bytes) -> dict[str, Any]:
    """Store ``body`` under a name of its own and return the reference its message carries. Stored
    twice (two relays, or one that stopped before publishing), a message has two copies, both
    removed with its row."""
    key = storage().save(f"{event_type}/{message_id}.{uuid.uuid4().hex}.json", ContentFile(body))
    return {"key": key, "size": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def _of(key: object, event_type: str, message_id: object) -> bool:
    """Whether ``key`` is a name the relay stores ``message_id``'s payload under."""
    if not (isinstance(key, str) and isinstance(message_id, str) and key.startswith(f"{event_type}/")):
        return False
    name = _STORED_NAME.fullmatch(key[len(event_type) + 1 :])
    return name is not None and name.group(1) == message_id


def fetch(reference: object, *, event_type: str, message_id: str, headers: dict[str, Any]) -> bytes:
    """The payload ``reference`` names, checked; ``InvalidMessage`` (a dead letter) otherwise."""
    if not isinstance(reference, dict) or set(reference) != {"key", "size", "sha256"}:
        raise InvalidMessage("invalid_claim_check", f"{HEADER} is not {{key, size, sha256}}: {str(reference)[:200]}")
    key, size, sha256 = reference["key"], reference["size"], reference["sha256"]
    # Its own message's, or (a dead letter replayed as a new message) the one it replays.
    if not any(_of(key, event_type, mid) for mid in (message_id, headers.get(REPLAY_OF_HEADER))):
        raise InvalidMessage(
            "invalid_claim_check",
            f"the key {str(key)[:300]!r} is not where the relay stores this message's payload "
            f"({event_type}/{str(message_id)[:100]}.<random>.json)",
        )
    largest = claim_check_limits()[1]
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= largest:
        raise InvalidMessage(
            "invalid_claim_check",
            f"its size {str(size)[:40]} is not a number of bytes up to CLAIM_CHECK_MAX_BYTES ({largest})",
        )
    try:
        with storage().open(key, "rb") as stored:
            body: bytes = stored.read(size + 1)  # one byte more: a longer file is told apart, never read whole
    except FileNotFoundError:
        raise InvalidMessage(
            "claim_check_missing", f"no payload is stored at {key} (purged, or another storage)"
        ) from None
    except Exception as exc:  # noqa: BLE001 - a storage's own errors (network, permissions): replay it once it is back
        raise StorageUnavailable(f"the storage did not give {key}: {type(exc).__name__}: {exc}") from None
    if len(body) != size or hashlib.sha256(body).hexdigest() != sha256:
        raise InvalidMessage(
            "claim_check_mismatch",
            f"the payload stored at {key} is not the one referenced (size {size}, sha256 {str(sha256)[:64]})",
        )
    return body


def sweep(event_types: Iterable[str], referenced: Callable[[str, dict[str, str]], set[str]]) -> int:
    """Delete the stored payloads of ``event_types`` that nothing refers to any more (``referenced``:
    of some stored names of one event type, each with its message id, those still referred to); how
    many.

    Only the event types this deployment publishes: the storage may be shared with others, whose
    payloads their own housekeeping keeps."""
    where, removed = storage(), 0
    for event_type in sorted(set(event_types)):
        try:
            _, names = where.listdir(event_type)
        except FileNotFoundError:
            continue
        except Exception as exc:  # noqa: BLE001 - a storage's own errors: swept at the next housekeeping
            logger.warning("stored payloads of %s not swept: %s: %s", event_type, type(exc).__name__, exc)
            continue
        stored = {name: found.group(1) for name in names if (found := _STORED_NAME.fullmatch(name))}
        kept = referenced(event_type, stored)
        for name in stored:
            if name in kept:
                continue
            try:
                where.delete(f"{event_type}/{name}")
            except Exception as exc:  # noqa: BLE001 - as above
                logger.warning("stored payload %s/%s not deleted: %s: %s", event_type, name, type(exc).__name__, exc)
                continue
            removed += 1
    return removed
