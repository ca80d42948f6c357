"""messaging's public interface: the only module the bounded contexts import.

- ``publish(...)`` writes an event to the outbox inside the caller's transaction;
- ``register_handler(...)`` subscribes a context's function to an event type;
- handlers receive an ``IncomingEvent`` and raise ``InvalidPayload`` for a payload that can
  never be handled (dead-lettered at once) or anything else to be retried;
- ``timeline_for`` reads every event of one order across all contexts.
"""

from messaging.dispatch import InvalidPayload, TransientError
from messaging.envelope import IncomingEvent
from messaging.lifecycle import Stopper
from messaging.masking import mask_sensitive
from messaging.outbox import OutsideTransactionError, publish, tracing
from messaging.registry import register_handler
from messaging.selectors import timeline_for

__all__ = [
    "IncomingEvent",
    "InvalidPayload",
    "OutsideTransactionError",
    "Stopper",
    "TransientError",
    "mask_sensitive",
    "publish",
    "register_handler",
    "timeline_for",
    "tracing",
]
