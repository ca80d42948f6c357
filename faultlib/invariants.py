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
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import CharField, Count, Exists, OuterRef, Sum
from django.db.models.functions import Cast

from inventory.models import Product, Reservation
from kernel.contexts import installed
from messaging.contracts import schemas, validation_error
from messaging.models import DeadLetter, InboxMessage, OutboxMessage
from messaging.topology import ANY_EVENT, consumers, queue_bindings
from orders.models import Order, OrderLine, StorefrontProduct
from payments.gateway import gateway
from payments.models import Payment

TERMINAL = {Order.Status.CONFIRMED, Order.Status.FAILED, Order.Status.CANCELLED}
# Saga events an order has at most one of; a second one means a message had a double effect.
ONCE_PER_ORDER = (
    "orders.order.created",
    "payments.payment.succeeded",
    "payments.payment.failed",
    "payments.payment.refunded",
    "inventory.stock.reserved",
    "inventory.stock.reservation_failed",
    "inventory.stock.released",
    "orders.order.confirmed",
    "orders.order.failed",
    "orders.order.cancelled",
    "shipping.shipment.created",
    "shipping.shipment.dispatched",
    "shipping.shipment.cancelled",
    "shipping.shipment.return_requested",
)


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
        "pending_orders": Order.objects.filter(status=Order.Status.PENDING).count(),
        # the gateway worker's work: a charge or refund recorded in flight, its outcome not yet
        "calls_in_flight": Payment.objects.filter(
            status__in=[Payment.Status.CHARGING, Payment.Status.REFUNDING]
        ).count(),
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
            and (allow_pending_orders or (state["pending_orders"] == 0 and state.get("calls_in_flight", 0) == 0))
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
    broker: bool = True,
) -> Report:
    """Check everything the saga promises once quiet; ``order_ids`` limits it to those orders.

    ``expected_dead_letters`` must all be there with their reason, and no other dead letter
    may exist unless ``tolerated_dead_letter`` accepts it. ``cancelled`` are orders whose
    cancellation was accepted (202). ``broker`` also checks that every queue of the test's
    vhost is empty: exact only once the consumers have stopped.
    """
    report = Report()
    orders = Order.objects.all()
    if order_ids is not None:
        orders = orders.filter(pk__in=[uuid.UUID(str(i)) for i in order_ids])
    orders = {str(o.id): o for o in orders}
    scope = set(orders)

    _check_terminal(report, orders, {str(i) for i in cancelled})
    _check_stock(report, initial_stock)
    _check_money(report, orders, whole_ledger=order_ids is None)
    _check_contexts(report, orders, whole=order_ids is None)
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


def _check_terminal(report: Report, orders: dict[str, Order], cancelled: set[str]) -> None:
    statuses = Counter(o.status for o in orders.values())
    reasons = Counter(o.failure_reason for o in orders.values() if o.failure_reason)
    pending = [f"order {oid} is {o.status}" for oid, o in orders.items() if o.status not in TERMINAL]
    summary = f"{len(orders)} orders ({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))})"
    if reasons:
        summary += f"; failed for {', '.join(f'{r} {n}' for r, n in sorted(reasons.items()))}"
    report.check("every order terminal", pending, summary)
    reverted = [
        f"order {oid} was cancelled (202) but is {orders[oid].status}"
        for oid in sorted(cancelled)
        if oid in orders and orders[oid].status != Order.Status.CANCELLED
    ]
    report.check("an accepted cancellation stays", reverted, f"{len(cancelled)} cancellations accepted")


def _check_stock(report: Report, initial_stock: dict[str, int]) -> None:
    held = dict(
        OrderLine.objects.filter(order__status=Order.Status.CONFIRMED, sku__in=initial_stock)
        .values_list("sku")
        .annotate(units=Sum("quantity"))
    )
    products = {p.sku: p for p in Product.objects.filter(sku__in=initial_stock)}
    problems = []
    for sku, initial in sorted(initial_stock.items()):
        available = products[sku].stock if sku in products else 0
        if available + held.get(sku, 0) != initial:
            problems.append(f"{sku}: initial {initial} != available {available} + held {held.get(sku, 0)}")
    summary = ", ".join(
        f"{sku} {initial} = {products[sku].stock} + {held.get(sku, 0)}"
        for sku, initial in sorted(initial_stock.items())
        if sku in products
    )
    report.check("stock conserved (initial = available + held by CONFIRMED)", problems, summary)

    confirmed = set(
        str(i)
        for i in Order.objects.filter(status=Order.Status.CONFIRMED, lines__sku__in=initial_stock).values_list(
            "id", flat=True
        )
    )
    reserved = {
        str(r.order_id)
        for r in Reservation.objects.filter(status=Reservation.Status.RESERVED)
        if any(line["sku"] in initial_stock for line in r.lines)
    }
    problems = [f"order {oid} is CONFIRMED without a reservation" for oid in sorted(confirmed - reserved)]
    problems += [f"order {oid} holds stock but is not CONFIRMED" for oid in sorted(reserved - confirmed)]
    report.check("stock reserved exactly for CONFIRMED orders", problems, f"{len(reserved)} reservations held")

    storefront = {s.sku: s for s in StorefrontProduct.objects.filter(sku__in=initial_stock)}
    problems = [
        f"{sku}: storefront shows {storefront[sku].available} (v{storefront[sku].version}), "
        f"inventory has {p.stock} (v{p.version})"
        if sku in storefront
        else f"{sku}: missing from the storefront"
        for sku, p in sorted(products.items())
        if sku not in storefront or (storefront[sku].available, storefront[sku].version) != (p.stock, p.version)
    ]
    report.check("storefront in step with inventory", problems, f"{len(products)} products")


def _check_money(report: Report, orders: dict[str, Order], *, whole_ledger: bool) -> None:
    moved: dict[str, list[tuple[str, Decimal]]] = defaultdict(list)
    for op in gateway.ledger() if whole_ledger else (op for oid in orders for op in gateway.ledger(order_id=oid)):
        moved[op.order_id].append((op.kind, op.amount))
    payments = {str(p.order_id): p for p in Payment.objects.filter(order_id__in=list(orders))}
    problems, charged, refunded = [], 0, 0
    for oid, order in orders.items():
        ops = moved.get(oid, [])
        charged += sum(1 for kind, _ in ops if kind == "charge")
        refunded += sum(1 for kind, _ in ops if kind == "refund")
        if order.status == Order.Status.CONFIRMED:
            if ops != [("charge", order.total)]:
                problems.append(f"CONFIRMED order {oid} (total {order.total}) moved {ops}")
        elif order.status in TERMINAL and ops not in ([], [("charge", order.total), ("refund", order.total)]):
            problems.append(f"{order.status} order {oid} (total {order.total}) moved {ops}")
        payment = payments.get(oid)
        status = payment.status if payment else None
        agrees = {
            (): {None, Payment.Status.DECLINED, Payment.Status.VOIDED},
            ("charge",): {Payment.Status.CHARGED},
            ("charge", "refund"): {Payment.Status.REFUNDED},
        }.get(tuple(kind for kind, _ in ops), set())
        if order.status in TERMINAL and status not in agrees:
            problems.append(f"payments records {status} for order {oid}, the gateway moved {ops}")
    if whole_ledger:
        strangers = sorted(set(moved) - set(orders))
        problems += [f"money moved for {oid}, which is no order: {moved[oid]}" for oid in strangers]
    report.check(
        "money by the gateway ledger (CONFIRMED: one charge; FAILED/CANCELLED: none or charge + equal refund)",
        problems,
        f"{charged} charges, {refunded} refunds",
    )


def _check_contexts(report: Report, orders: dict[str, Order], *, whole: bool) -> None:
    """Each installed context's own invariants, from its package (``<context>/invariants.py``'s
    ``check``): its rows against the orders' outcomes."""
    statuses = {oid: o.status for oid, o in orders.items()}
    orchestrated = frozenset(oid for oid, o in orders.items() if o.saga_style == Order.SagaStyle.ORCHESTRATION)
    for declaration in installed():
        module = f"{declaration.package}.invariants"
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module).check(report, statuses, whole=whole, orchestrated=orchestrated)


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
        outbox.filter(event_type__in=ONCE_PER_ORDER)
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
    """Each event (event_type, schema_version, payload) that its version's schema refuses."""
    problems = []
    for event_type, version, payload in rows:
        if (event_type, version) not in schemas():
            problems.append(f"{event_type} v{version} has no schema")
        elif error := validation_error(event_type, version, payload):
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
