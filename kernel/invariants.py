"""What the saga's invariants are checked against, shared by every context's ``invariants`` module.

After a fault test or ``make chaos`` (``faultlib.invariants.check_invariants``), each installed
context with a ``<context>/tests/invariants.py`` (test code its production code never imports)
checks its own rows against each order's outcome.
Such a module may define:

- ``saga_outcomes(order_ids)``: each order's outcome (the one context that keeps the order);
- ``facts(facts)``: what it knows that another context's check needs (kept under its name in
  ``SagaFacts.shared``: a stock level, say);
- ``check(report, facts)``: its checks, each one ``report.check(name, problems, summary)``;
- ``in_progress()``: its work not done yet, by name (an order still pending, a gateway call in
  flight), which the fault tests wait for;
- ``ONCE_PER_ORDER``: its event types an order has at most one of.

A context's module imports only its own models: what it needs of another comes in ``SagaFacts``.
"""

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

ORCHESTRATION = "orchestration"


@dataclass(frozen=True)
class OrderOutcome:
    status: str  # PENDING, CONFIRMED, FAILED, CANCELLED, RETURNING or RETURNED
    total: Decimal
    failure_reason: str
    saga_style: str
    lines: dict[str, int]  # sku -> quantity


@dataclass
class SagaFacts:
    outcomes: dict[str, OrderOutcome]  # order id -> its outcome, as the order's keeper records it
    whole: bool  # these are every order there is (else: a test's own among others)
    initial_stock: dict[str, int]  # the SKUs under test and their stock before it
    cancelled: set[str] = field(default_factory=set)  # the order ids whose cancellation was accepted (202)
    returned: set[str] = field(default_factory=set)  # the order ids whose return was accepted (202)
    shared: dict[str, Any] = field(default_factory=dict)  # context name -> what its facts() said

    @property
    def statuses(self) -> dict[str, str]:
        return {order_id: outcome.status for order_id, outcome in self.outcomes.items()}

    @property
    def orchestrated(self) -> frozenset[str]:
        return frozenset(oid for oid, outcome in self.outcomes.items() if outcome.saga_style == ORCHESTRATION)
