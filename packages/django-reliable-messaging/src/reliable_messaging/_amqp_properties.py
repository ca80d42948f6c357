"""py-amqp's decoding of a message's properties, made total: a message whose properties cannot
be decoded is delivered with a marker instead of stopping the consumer.

py-amqp decodes a delivery's content header inside ``drain_events``: a header string that is
not UTF-8 raises ``UnicodeDecodeError``, a table nested a few thousand levels deep
``RecursionError``, a timestamp past year 9999 ``ValueError``. Raised there, the error ends the
consumer process, and the frame reader is left expecting a body it will then refuse; the
message, never acked, comes back after the restart and does it again, up to the queue's
delivery limit, and for ever in a dead-letter queue (which has none). So a header that cannot
be decoded is replaced here by ``UNDECODABLE`` (the error's text) and the message goes on to the
consumer, which dead-letters it as ``invalid_headers`` (``reliable_messaging._edge``).

A body, too, is bounded here: py-amqp keeps every frame of a body (128 KiB each) and joins them,
so a 100 MB message costs a consumer twice that before any code of the bus sees it. A body the
content header announces larger than ``MAX_MESSAGE_BYTES`` is read frame by frame and dropped,
only its first ``KEPT_OF_OVERSIZED`` bytes kept, and marked ``OVERSIZED`` (its size and sha256):
the consumer dead-letters it as ``payload_too_large``. A ``compression`` header, which kombu
would act on, is moved aside as ``COMPRESSED`` (a dead letter ``invalid_headers``).
"""

import hashlib
import struct
from typing import Any

from amqp import basic_message
from amqp.exceptions import FrameSyntaxError
from amqp.serialization import GenericContent

from reliable_messaging._conf import max_message_bytes

UNDECODABLE = "x-undecodable-properties"
OVERSIZED = "x-oversized-body"
COMPRESSED = "x-refused-compression"
# What a dead letter keeps of an oversized body: enough to tell what it was, never the whole.
KEPT_OF_OVERSIZED = 64 * 1024
_DECODING_ERRORS = (UnicodeDecodeError, RecursionError, ValueError, OverflowError, struct.error, FrameSyntaxError)
_load_properties = basic_message.Message._load_properties
_inbound_header = GenericContent.inbound_header
_inbound_body = GenericContent.inbound_body


def _load_properties_or_mark(self: Any, class_id: int, buf: bytes, offset: int) -> int:
    try:
        end: int = _load_properties(self, class_id, buf, offset)
        return end
    except _DECODING_ERRORS as exc:
        self.properties = {"application_headers": {UNDECODABLE: f"{type(exc).__name__}: {exc}"[:500]}}
        return offset


def too_large(size: int, sha256: str, limit: int) -> str:
    kept = min(size, KEPT_OF_OVERSIZED)
    return f"the body is {size} bytes (sha256 {sha256}), over MAX_MESSAGE_BYTES ({limit}): its first {kept} kept"


def bounded(body: bytes, headers: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """A body over the limit that a transport assembled whole (the embedded broker; py-amqp's are
    cut while they arrive): its prefix, and the headers marked ``OVERSIZED``."""
    limit = max_message_bytes()
    if len(body) <= limit or OVERSIZED in headers:
        return body, headers
    return body[:KEPT_OF_OVERSIZED], {
        **headers,
        OVERSIZED: too_large(len(body), hashlib.sha256(body).hexdigest(), limit),
    }


def _inbound_header_bounded(self: Any, buf: bytes, offset: int = 0) -> int:
    offset = _inbound_header(self, buf, offset)
    headers = self.properties.get("application_headers")
    if isinstance(headers, dict) and "compression" in headers:
        # kombu would decompress the body before the bus sees it: without bound (a zip bomb), or
        # raising out of drain_events. The bus never compresses: refused (``COMPRESSED``).
        headers[COMPRESSED] = repr(headers.pop("compression"))[:100]
    if self.body_size > (limit := max_message_bytes()):
        self.__dict__["_oversized"] = (limit, hashlib.sha256(), bytearray())
    return offset


def _inbound_body_bounded(self: Any, buf: bytes) -> None:
    """As py-amqp's, except that an oversized body's frames are hashed and dropped as they come."""
    oversized = self.__dict__.get("_oversized")
    if oversized is None:
        _inbound_body(self, buf)
        return
    limit, digest, kept = oversized
    digest.update(buf)
    kept += buf[: KEPT_OF_OVERSIZED - len(kept)]
    self.body_received += len(buf)
    if self.body_received >= self.body_size:
        del self.__dict__["_oversized"]
        self.body = bytes(kept)
        headers = self.properties.get("application_headers")
        if not isinstance(headers, dict):
            headers = self.properties["application_headers"] = {}
        headers[OVERSIZED] = too_large(self.body_size, digest.hexdigest(), limit)
        self.ready = True


def install() -> None:
    """Idempotent; called when messaging is loaded, before any connection."""
    basic_message.Message._load_properties = _load_properties_or_mark
    GenericContent.inbound_header = _inbound_header_bounded
    GenericContent.inbound_body = _inbound_body_bounded
