"""py-amqp's decoding of a message's properties, made total: a message whose properties cannot
be decoded is delivered with a marker instead of stopping the consumer.

py-amqp decodes a delivery's content header inside ``drain_events``: a header string that is
not UTF-8 raises ``UnicodeDecodeError``, a table nested a few thousand levels deep
``RecursionError``, a timestamp past year 9999 ``ValueError``. Raised there, the error ends the
consumer process, and the frame reader is left expecting a body it will then refuse; the
message, never acked, comes back after the restart and does it again, up to the queue's
delivery limit, and for ever in a dead-letter queue (which has none). So a header that cannot
be decoded is replaced here by ``UNDECODABLE`` (the error's text) and the message goes on to the
consumer, which dead-letters it as ``invalid_headers`` (``reliable_messaging.edge``).
"""

import struct

from amqp import basic_message
from amqp.exceptions import FrameSyntaxError

UNDECODABLE = "x-undecodable-properties"
_DECODING_ERRORS = (UnicodeDecodeError, RecursionError, ValueError, OverflowError, struct.error, FrameSyntaxError)
_load_properties = basic_message.Message._load_properties


def _load_properties_or_mark(self, class_id, buf, offset):
    try:
        return _load_properties(self, class_id, buf, offset)
    except _DECODING_ERRORS as exc:
        self.properties = {"application_headers": {UNDECODABLE: f"{type(exc).__name__}: {exc}"[:500]}}
        return offset


def install() -> None:
    """Idempotent; called when messaging is loaded, before any connection."""
    basic_message.Message._load_properties = _load_properties_or_mark
