"""The invariants every fault test and ``make chaos`` check once the system is quiet.

``wait_quiet`` waits until nothing is left to do (outbox drained, queues empty, every event
handled by every consumer bound to it or dead-lettered, no change for a while);
``check_invariants`` then reads the database, the gateway's ledger and the broker and
returns every violation it finds, with the list of checks it made, so that a test can assert
``report.violations == []`` and ``make chaos`` can print both.
"""

import importlib
import importlib.util
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType

from django.db.models import CharField, Count, Exists, OuterRef
from django.db.models.functions import Cast
from reliable_messaging.hosting import ANY_EVENT, consumers, installed, queue_bindings
from reliable_messaging.models import DeadLetter, InboxMessage, OutboxMessage
from reliable_messaging.testing import schemas, validation_error, without_encrypted

from kernel.invariants import SagaFacts


def context_support(module: str) -> list[tuple[str, ModuleType]]:
    """Each installed context's test-support module ``<package>/tests/<module>.py``, by the context's
    name, in the installed order: what it offers the fault tests from its own package, test code
    its production code never imports (a context removed takes it along)."""
    found = []
    for declaration in installed():
        dotted = f"{declaration.package}.tests.{module}"
        if importlib.util.find_spec(f"{declaration.package}.tests") and importlib.util.find_spec(dotted):
            found.append((declaration.name, importlib.import_module(dotted)))
    return found


def context_invariants() -> list[tuple[str, ModuleType]]:
    """Each installed context's ``<package>/tests/invariants.py``: the checks of its own rows (kernel/invariants.py
    says what one holds)."""
    return context_support("invariants")


def once_per_order() -> tuple[str, ...]:
    """The saga's events an order has at most one of, as each context declares its own: a second
    one means a message had a double effect."""
    return tuple(event for _, module in context_invariants() for event in getattr(module, "ONCE_PER_ORDER", ()))


@dataclass(frozen=True)
class ExpectedDeadLetter:
    consumer: str
    message_id: str  # "" for a message that had none
    reason: str


@dataclass
class Report:
    """Every check made (name, summary of what it saw, problems found) and all the violations."""

    results: list[tuple[str, str, list[str]]] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        return [f"{name}: {problem}" for name, _, problems in self.results for problem in problems]

    @property
    def checks(self) -> list[str]:
        return [f"{name}: {summary}" if summary else name for name, summary, _ in self.results]

    def check(self, name: str, problems: list[str], summary: str = "") -> None:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        self.results.append((name, summary, shown))

    def lines(self) -> list[str]:
        """One line per check, ``ok`` or ``VIOLATED``, then the violations."""
        marks = [
            f"{'ok' if not problems else 'VIOLATED':9} {check}"
            for check, (_, _, problems) in zip(self.checks, self.results, strict=True)
        ]
        return marks + [f"  - {v}" for v in self.violations]

    def __str__(self) -> str:
        return "\n".join(self.lines())


# --- waiting for quiet --------------------------------------------------------------------


def broker_queue_depths() -> dict[str, int] | None:
    """Messages per queue of the test's vhost, ready and unacknowledged; None if unreachable.

    ``TEST_BROKER_NODE``: the nodes of a test cluster (comma-separated), asked in turn; else the machine's node.
    """
    vhost = os.environ["TEST_BROKER_VHOST"]
    nodes = [n for n in os.environ.get("TEST_BROKER_NODE", "").split(",") if n] or [None]
    for node in nodes:
        result = subprocess.run(
            ["rabbitmqctl", "-q", *(["-n", node] if node else []), "list_queues", "-p", vhost, "name", "messages",
             "--no-table-headers"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )  # fmt: skip
        if not result.returncode:
            break
    else:
        return None
    depths = {}
    for line in result.stdout.splitlines():
        name, _, count = line.rpartition("\t")
        if name and not name.startswith("test_capture_"):  # a test's own observation queues
            depths[name] = int(count)
    return depths


def unhandled_deliveries() -> int:
    """Published events not yet handled (nor dead-lettered) by a consumer bound to them."""
    return sum(_unhandled(consumer).count() for consumer in consumers())


def _unhandled(consumer: str):
    """Published outbox rows routed to ``consumer`` with neither an inbox row nor a dead letter."""
    keys = queue_bindings()[consumer]
    rows = OutboxMessage.objects.filter(published_at__isnull=False)
    if ANY_EVENT not in keys:
        rows = rows.filter(event_type__in=keys)
    message_id = Cast(OuterRef("event_id"), output_field=CharField())
    return rows.exclude(Exists(InboxMessage.objects.filter(consumer=consumer, message_id=message_id))).exclude(
        Exists(DeadLetter.objects.filter(consumer=consumer, message_id=message_id))
    )


def system_state() -> dict:
    depths = broker_queue_depths()
    return {
        "unpublished": OutboxMessage.objects.filter(published_at__isnull=True, parked_at__isnull=True).count(),
        "queued": None if depths is None else sum(depths.values()),
        "unhandled": unhandled_deliveries(),
        "inbox": InboxMessage.objects.count(),
        "outbox": OutboxMessage.objects.count(),
        "dead_letters": DeadLetter.objects.count(),
        # the contexts' work not done yet: orders pending, gateway calls in flight
        "pending_orders": 0,
        "calls_in_flight": 0,
        **{
            key: n
            for _, module in context_invariants()
            if hasattr(module, "in_progress")
            for key, n in module.in_progress().items()
        },
    }


def wait_quiet(
    *,
    timeout: float,
    stable_for: float = 3.0,
    allow_pending_orders: bool = False,
    state_of=None,
    interval: float = 0.5,
    what: str = "the system",
) -> dict:
    """Wait until nothing is left to do and nothing changes for ``stable_for`` seconds.

    Messages held by a consumer count (``messages`` includes unacknowledged ones), and so do retries
    waiting in delay queues and the gateway worker's calls in flight (unless pending orders are
    allowed: a charge that keeps failing is what keeps such an order pending). Fails with the last
    state seen after ``timeout``. ``state_of``: where the state comes from (``system_state`` of this
    database by default).
    """
    deadline = time.monotonic() + timeout
    stable_since, last = None, None
    while time.monotonic() < deadline:
        state = (state_of or system_state)()
        idle = (
            state["unpublished"] == 0
            and state["queued"] == 0
            and state["unhandled"] == 0
            and (allow_pending_orders or (state.get("pending_orders", 0) == 0 and state.get("calls_in_flight", 0) == 0))
        )
        if idle and state == last:
            if time.monotonic() - stable_since >= stable_for:
                return state
        else:
            stable_since = time.monotonic()
        last = state
        time.sleep(interval)
    raise AssertionError(f"{what} did not become quiet in {timeout}s; last state: {last}")


# --- the invariants -----------------------------------------------------------------------


def check_invariants(
    *,
    initial_stock: dict[str, int],
    order_ids: Iterable | None = None,
    expected_dead_letters: Iterable[ExpectedDeadLetter] = (),
    tolerated_dead_letter: Callable[[DeadLetter], bool] | None = None,
    cancelled: Iterable = (),
    returned: Iterable = (),
    broker: bool = True,
) -> Report:
    """Check everything the saga promises once quiet; ``order_ids`` limits it to those orders.

    ``expected_dead_letters`` must all be there with their reason, and no other dead letter
    may exist unless ``tolerated_dead_letter`` accepts it. ``cancelled`` are orders whose
    cancellation was accepted (202), ``returned`` those whose return was. ``broker`` also checks
    that every queue of the test's vhost is empty: exact only once the consumers have stopped.
    """
    report = Report()
    modules = context_invariants()
    [keeper] = [module for _, module in modules if hasattr(module, "saga_outcomes")]
    facts = SagaFacts(
        outcomes=keeper.saga_outcomes(order_ids),
        whole=order_ids is None,
        initial_stock=dict(initial_stock),
        cancelled={str(i) for i in cancelled},
        returned={str(i) for i in returned},
    )
    scope = set(facts.outcomes)
    for name, module in modules:
        if hasattr(module, "facts"):
            facts.shared[name] = module.facts(facts)
    for _, module in modules:
        if hasattr(module, "check"):
            module.check(report, facts)
    _check_once(report, scope if order_ids is not None else None)
    _check_nothing_lost(report, scope if order_ids is not None else None)
    if order_ids is None:
        _check_dead_letters(report, list(expected_dead_letters), tolerated_dead_letter)
    _check_outbox(report, scope if order_ids is not None else None)
    _check_contracts(report, scope if order_ids is not None else None)
    if broker:
        depths = broker_queue_depths()
        if depths is None:
            report.check("queues empty", ["rabbitmqctl list_queues failed"])
        else:
            full = [f"{name} holds {n}" for name, n in sorted(depths.items()) if n]
            report.check("queues empty", full, f"{len(depths)} queues, 0 messages")
    return report


def _check_once(report: Report, scope: set[str] | None) -> None:
    inbox = InboxMessage.objects.all()
    outbox = OutboxMessage.objects.all()
    if scope is not None:
        inbox, outbox = inbox.filter(correlation_id__in=scope), outbox.filter(correlation_id__in=scope)
    doubled = inbox.values("consumer", "message_id").annotate(n=Count("id")).filter(n__gt=1)
    problems = [f"{d['consumer']} recorded {d['message_id']} {d['n']} times" for d in doubled]
    # A message handled twice would publish its consequences twice, under the same cause.
    effects = (
        outbox.exclude(causation_id="")
        .values("causation_id", "event_type", "aggregate_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    problems += [f"{e['causation_id']} caused {e['event_type']} {e['n']} times" for e in effects]
    per_order = (
        outbox.filter(event_type__in=once_per_order())
        .values("correlation_id", "event_type")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    problems += [f"order {p['correlation_id']} has {p['n']} x {p['event_type']}" for p in per_order]
    report.check(
        "each consumer handled each message id at most once (inbox, effects, saga events)",
        problems,
        f"{inbox.count()} inbox rows",
    )


def _check_nothing_lost(report: Report, scope: set[str] | None) -> None:
    problems = []
    for consumer in consumers():
        rows = _unhandled(consumer)
        if scope is not None:
            rows = rows.filter(correlation_id__in=scope)
        problems += [f"{consumer} never handled {t} {i}" for i, t in rows.values_list("event_id", "event_type")]
    published = OutboxMessage.objects.filter(published_at__isnull=False).count()
    report.check(
        "every published event handled (or dead-lettered) by every consumer bound to it",
        problems,
        f"{published} events published",
    )


def _check_dead_letters(
    report: Report, expected: list[ExpectedDeadLetter], tolerated: Callable[[DeadLetter], bool] | None
) -> None:
    letters = list(DeadLetter.objects.all())
    found = Counter(ExpectedDeadLetter(d.consumer, d.message_id, d.reason) for d in letters)
    wanted = Counter(expected)
    problems = [f"missing: {e}" for e in sorted(wanted - found, key=str)]
    extra = [d for d in letters if (found - wanted)[ExpectedDeadLetter(d.consumer, d.message_id, d.reason)]]
    # A message without an id cannot be deduplicated: a crash between its dead letter's commit
    # and the ack stores it again. Extra copies of an expected one are no violation.
    anonymous = {(e.consumer, e.reason) for e in wanted if not e.message_id}
    problems += [
        f"unexpected: {d.consumer} {d.message_id or '-'} {d.reason}: {d.error[:200]}"
        for d in extra
        if not (tolerated and tolerated(d)) and not (not d.message_id and (d.consumer, d.reason) in anonymous)
    ]
    problems += [f"dead letter {d.pk} has no error" for d in letters if not d.error]
    report.check(
        "every poison message is a dead letter with its reason, and nothing else is",
        problems,
        f"{len(letters)} dead letters ({len(expected)} expected)",
    )


def contract_problems(rows) -> list[str]:
    """Each event (event_type, schema_version, payload as stored) that its version's schema refuses
    (an encrypted field, checked clear by publish(), left out)."""
    problems = []
    for event_type, version, payload in rows:
        if (event_type, version) not in schemas():
            problems.append(f"{event_type} v{version} has no schema")
        elif error := validation_error(event_type, version, without_encrypted(payload)):
            problems.append(error)
    return problems


def _check_contracts(report: Report, scope: set[str] | None) -> None:
    rows = OutboxMessage.objects.all()
    if scope is not None:
        rows = rows.filter(correlation_id__in=scope)
    rows = list(rows.values_list("event_type", "schema_version", "payload"))
    report.check(
        "every event published validates against its version's schema",
        contract_problems(rows),
        f"{len(rows)} events",
    )


def _check_outbox(report: Report, scope: set[str] | None) -> None:
    rows = OutboxMessage.objects.filter(published_at__isnull=True)
    if scope is not None:
        rows = rows.filter(correlation_id__in=scope)
    problems = [f"{r.event_type} {r.event_id} is still pending" for r in rows if r.parked_at is None]
    problems += [f"parked {r.event_type} {r.event_id} has no error" for r in rows if r.parked_at and not r.last_error]
    parked = sum(1 for r in rows if r.parked_at)
    total = OutboxMessage.objects.count()
    report.check(
        "no outbox row unpublished but parked ones with their error", problems, f"{total} rows, {parked} parked"
    )
