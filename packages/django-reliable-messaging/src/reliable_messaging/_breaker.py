"""A handler's circuit breaker, in each consumer process: a dependency that is down (a remote
gateway, a database refusing its locks) must not burn every message's retries into dead letters.

Only transient failures count (``TransientError``, a database error: ``Decision.transient``); a
handler's bug says nothing of its dependency. After ``failures`` of them in a row the breaker
opens: the handler's messages are not attempted but sent back to wait until the cool-down ends,
their attempts unspent (``reliable_messaging._consumer_batch``). Then it is half-open: one message
is tried, the others of the batch kept for the next one; a success closes the breaker, a transient
failure opens it again for another cool-down. Closed by default: a handler whose declaration names
no ``breaker`` has none.
"""

import logging
from dataclasses import dataclass, field

from reliable_messaging import _metrics as metrics
from reliable_messaging._declarations import Breaker
from reliable_messaging._registry import handler_for

logger = logging.getLogger("reliable_messaging.consumer")


@dataclass
class CircuitBreaker:
    consumer: str
    handler: str
    policy: Breaker
    failures_in_row: int = 0
    open_until: float | None = None  # epoch seconds: the cool-down's end; None while closed

    def waiting_until(self, now: float) -> float | None:
        """Until when the handler's messages wait (open), or None: one may be attempted."""
        return self.open_until if self.open_until is not None and now < self.open_until else None

    def half_open(self, now: float) -> bool:
        return self.open_until is not None and now >= self.open_until

    def succeeded(self) -> None:
        if self.open_until is not None:
            logger.warning("breaker closed: %s handles its messages again", self.handler)
            metrics.breaker_open(self.consumer, self.handler, False)
        self.failures_in_row, self.open_until = 0, None

    def failed(self, now: float) -> None:
        """A transient failure: the breaker opens at the ``failures``-th in a row, or when a trial fails."""
        self.failures_in_row += 1
        if self.open_until is None and self.failures_in_row < self.policy.failures:
            return
        if self.open_until is None or self.half_open(now):
            logger.warning(
                "breaker open: %s failed %d times in a row; its messages wait %.1fs, then one is tried",
                self.handler,
                self.failures_in_row,
                self.policy.cool_down,
            )
        self.open_until = now + self.policy.cool_down
        metrics.breaker_open(self.consumer, self.handler, True)


@dataclass
class Breakers:
    """A consumer process's breakers, one per handler whose declaration names one, made when first needed."""

    by_handler: dict[tuple[str, str], CircuitBreaker] = field(default_factory=dict)

    def of(self, consumer: str, event_type: object) -> CircuitBreaker | None:
        spec = handler_for(consumer, event_type) if isinstance(event_type, str) else None
        if spec is None or spec.policy.breaker is None:
            return None
        key = (consumer, spec.name)
        if (breaker := self.by_handler.get(key)) is None:
            breaker = self.by_handler[key] = CircuitBreaker(consumer, spec.name, spec.policy.breaker)
            metrics.breaker_open(consumer, spec.name, False)  # the series exists before it first opens
        return breaker
