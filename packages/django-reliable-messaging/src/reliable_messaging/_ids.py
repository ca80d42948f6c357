"""Event ids: time-ordered UUIDs (version 7, RFC 9562).

A random (version 4) id lands on a random leaf of every B-tree that indexes it: the outbox's
``event_id``, the inbox's ``(consumer, message_id)`` and the event log's ``message_id``. Once
those tables hold more rows than memory keeps hot, each insert and each mark-published (an
update that is never HOT) reads and rewrites a random page. A version 7 id starts with its
millisecond, so new ids go to the right-hand edge of each index. Ids a context hands
out as capabilities (an order id) should stay random (version 4).

Hand-written because Python 3.11 has no ``uuid.uuid7`` (3.14 does: replace this then), and
the ``uuid6`` package keeps its ids strictly increasing by moving its clock one millisecond
ahead for every id made within the same millisecond: at the relay's rates its ids would run
seconds ahead of the clock. Ids made in the same millisecond are not ordered among
themselves here, which costs nothing: they land on the same few pages.
"""

import os
import time
import uuid

_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0b10 << 62


def new_event_id() -> uuid.UUID:
    """48 bits of Unix time in milliseconds, then the version, 74 random bits and the variant."""
    milliseconds = time.time_ns() // 1_000_000
    random_bits = int.from_bytes(os.urandom(10), "big")
    rand_a, rand_b = random_bits >> 68, random_bits & ((1 << 62) - 1)  # 12 and 62 bits
    return uuid.UUID(int=(milliseconds << 80) | _VERSION_7 | (rand_a << 64) | _VARIANT_RFC | rand_b)
