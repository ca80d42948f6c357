"""Fault scenarios on real processes, shared by the fault tests (short) and ``make chaos`` (long).

Each one starts the saga's processes, seeds the catalogue, places a load of orders while an
``Injector`` fires its faults in the background, waits until the system is quiet, checks that
every long-running process is still alive (they recover by themselves), stops them with
SIGTERM and returns what happened. The caller then checks the invariants.
"""

import collections
import json
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kombu import Queue
from reliable_messaging.hosting import consumers
from reliable_messaging.models import DeadLetter

from faultlib import faults
from faultlib.broker import connection as broker_connection
from faultlib.broker import publish_raw
from faultlib.faults import Injection, Injector, Restartable
from faultlib.hostile_gateway import MANGLES, HostileGateway
from faultlib.invariants import ExpectedDeadLetter, wait_quiet
from faultlib.load import CATALOG, SAFE_TOKENS, OrderLoad, as_json, order_created_payload
from faultlib.processes import ProcessGroup, wait_until
from faultlib.saga import seed_catalog, wait_terminal

# Short retries so that a transient failure is retried within the test's time.
# The gateway worker started with such consumers gives a charge the gateway never answers up after
# 3 attempts (0.5 + 1 + 2 s of backoff), not a minute and a half.
FAST_RETRIES = {"CONSUMER_RETRY_DELAYS": "0.2,0.5,1", "CONSUMER_MAX_ATTEMPTS": "5", "GATEWAY_CHARGE_ATTEMPTS": "3"}
# Every installed context's consumer (the orchestrator's too, where it is installed) and the event log.
CONSUMER_POINTS = [
    f"consumer.{consumer}.{moment}" for consumer in consumers() for moment in ("before_commit", "before_ack")
]
# Where a return's steps commit (its saga's moves at orders, each participant's step) and the refund's call.
RETURN_POINTS = [
    *(f"consumer.{c}.before_commit" for c in ("orders", "shipping", "inventory", "payments")),
    "gateway_calls.after_call",
]
GATEWAY_CALL_POINTS = ["gateway_calls.before_call", "gateway_calls.after_call", "gateway_calls.after_outcome"]


@dataclass
class Outcome:
    injections: list[Injection]
    load: OrderLoad
    expected_dead_letters: list[ExpectedDeadLetter] = field(default_factory=list)
    tolerated_dead_letter: Callable[[DeadLetter], bool] | None = None
    exit_codes: list[int] = field(default_factory=list)  # of the SIGTERM at the end, all 0 expected

    def injected(self) -> list[str]:
        return [f"{i.at:7.2f}s  {i.description}" for i in self.injections]


def process_log_events(group: ProcessGroup, event: str) -> int:
    """How many JSON log lines of the group's processes have this ``event``."""
    count = 0
    for _, _, log in group.procs:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{") and json.loads(line).get("event") == event:
                count += 1
    return count


def _settle(group: ProcessGroup, running: list[Restartable], load: OrderLoad, timeout: float) -> list[int]:
    load.finish()
    try:
        wait_quiet(timeout=timeout)
    finally:
        dead = [f"{r.name} (pid {r.proc.pid}, exit {r.proc.poll()})" for r in running if not r.alive()]
        if dead:
            raise AssertionError(f"processes died instead of recovering: {dead}\n{group.logs()}")
    return [group.stop(r.proc) for r in running]


# Orders placed after ``max_orders`` while faults are still to come: a kill at a point waits for a
# message to pass that point, and without traffic it waits its 30 s and is NOT REACHED.
TRICKLE_PACE = (0.3, 0.8)


def _run(rng, load: OrderLoad, fault_list, *, max_orders: int, interval, at_least: int = 10) -> list[Injection]:
    injector = Injector(rng, fault_list, interval=interval)
    injector.start()
    load.run_while(injector.is_alive, max_orders=max_orders, at_least=at_least)
    # The orders can outrun the faults (each kill at a point waits for a process to start, slow on a
    # busy machine): 281 of 300 were placed when 14 faults were done, and with 100 the last 4 points
    # were not reached. Until the faults are done, an order now and then keeps every point passed.
    load.run_while(injector.is_alive, max_orders=sys.maxsize, pace=TRICKLE_PACE)
    return injector.finish()


def relay_kills(
    group: ProcessGroup, rng: random.Random, *, random_kills: int, confirm_kills: int, max_orders: int, quiet=120
) -> Outcome:
    """Two relays (small batches) SIGKILLed at random moments and right after the broker confirmed."""
    relays = [Restartable(group, "relay", "run_outbox_relay", "--batch-size", "5") for _ in range(2)]
    consumers = [Restartable(group, "consumers", "run_consumers", env=FAST_RETRIES) for _ in range(2)]
    seed_catalog(catalog=CATALOG)
    load = OrderLoad(rng)
    fault_list = [faults.kill_any(rng, relays)] * random_kills
    fault_list += [faults.kill_at(rng, relays, "relay.after_confirm", group.log_dir)] * confirm_kills
    rng.shuffle(fault_list)
    injections = _run(rng, load, fault_list, max_orders=max_orders, interval=(0.2, 1.0))
    return Outcome(injections, load, exit_codes=_settle(group, relays + consumers, load, quiet))


def consumer_kills(
    group: ProcessGroup, rng: random.Random, *, random_kills: int, points: list[str], max_orders: int, quiet=120
) -> Outcome:
    """Two consumer processes and the gateway worker SIGKILLed at random moments, inside handlers,
    between commit and ack, and between a gateway call's claim, the call and its outcome's commit
    (the ``gateway_calls.*`` points)."""
    relay = Restartable(group, "relay", "run_outbox_relay")
    calls = Restartable(group, "gateway-calls", "run_gateway_calls", env=FAST_RETRIES)  # before the consumers
    consumers = [Restartable(group, "consumers", "run_consumers", env=FAST_RETRIES) for _ in range(2)]
    seed_catalog(catalog=CATALOG)
    load = OrderLoad(rng)
    fault_list = [faults.kill_any(rng, [*consumers, calls])] * random_kills
    for point in points:
        targets = [calls] if point.startswith("gateway_calls.") else consumers
        fault_list.append(faults.kill_at(rng, targets, point, group.log_dir))
    rng.shuffle(fault_list)
    injections = _run(rng, load, fault_list, max_orders=max_orders, interval=(0.2, 1.0))
    return Outcome(injections, load, exit_codes=_settle(group, [relay, *consumers, calls], load, quiet))


def return_kills(
    group: ProcessGroup, rng: random.Random, *, random_kills: int, points: list[str], orders: int, quiet=120
) -> Outcome:
    """Confirmed orders returned (orders' return saga) while the two consumer processes and the
    gateway worker are SIGKILLed at random moments and at ``points``: each return must end
    RETURNED, its refund made once and its stock back (the invariants)."""
    relay = Restartable(group, "relay", "run_outbox_relay")
    calls = Restartable(group, "gateway-calls", "run_gateway_calls", env=FAST_RETRIES)  # before the consumers
    consumers = [Restartable(group, "consumers", "run_consumers", env=FAST_RETRIES) for _ in range(2)]
    seed_catalog(catalog=CATALOG)
    load = OrderLoad(rng, tokens=["tok_visa"], rare_share=0.0)
    for _ in range(orders):
        load.place()
    wait_terminal(list(load.orders), timeout=120)
    at_points = [
        faults.kill_at(rng, [calls] if point.startswith("gateway_calls.") else consumers, point, group.log_dir)
        for point in rng.sample(points, len(points))
    ]
    # the kills at points first, while returns are still coming; the random ones after
    injector = Injector(
        rng, at_points + [faults.kill_any(rng, [*consumers, calls])] * random_kills, interval=(0.2, 1.0)
    )
    injector.start()
    waiting = list(load.orders)
    while injector.is_alive():  # returned one after another while the faults strike
        if waiting:
            load.return_order(waiting.pop())
        else:  # the faults outlast the returns: new orders keep every consumer passing its points
            load.place()
        time.sleep(rng.uniform(0.3, 0.8))
    for order_id in waiting:
        load.return_order(order_id)
    injections = injector.finish()
    return Outcome(injections, load, exit_codes=_settle(group, [relay, *consumers, calls], load, quiet))


def connection_cuts(
    group: ProcessGroup, rng: random.Random, *, broker_cuts: int, database_cuts: int, max_orders: int, quiet=150
) -> Outcome:
    """Every broker connection of the vhost and every database backend of the processes cut mid-load.

    The deadline loop runs too (with a deadline no order reaches): it must survive the cuts.
    """
    relay = Restartable(group, "relay", "run_outbox_relay", "--batch-size", "20")
    consumers = [Restartable(group, "consumers", "run_consumers", env=FAST_RETRIES) for _ in range(2)]
    deadline = Restartable(group, "deadline", "expire_pending_orders", "--loop", env={"SAGA_TIMEOUT": "600"})
    seed_catalog(catalog=CATALOG)
    load = OrderLoad(rng)
    fault_list = [faults.close_broker_connections] * broker_cuts + [faults.terminate_database_backends] * database_cuts
    rng.shuffle(fault_list)
    injections = _run(rng, load, fault_list, max_orders=max_orders, interval=(0.5, 2.0))
    return Outcome(injections, load, exit_codes=_settle(group, [relay, *consumers, deadline], load, quiet))


# A card token per lie: on the charge (every mangle but "failed", which is a decline the client must
# believe), and on the refund of an order then cancelled.
GATEWAY_LIES = [f"tok_visa+{m}@charge" for m in MANGLES if m != "failed"] + [
    f"tok_visa+{m}@refund" for m in MANGLES if m not in ("nocharge", "notjson404")
]


def hostile_gateway(group: ProcessGroup, rng: random.Random, *, max_orders: int, quiet=240) -> Outcome:
    """The gateway worker behind a gateway that lies (faultlib/hostile_gateway.py): every mangled
    answer, on charges and on refunds, among as many honest orders, a third of them cancelled. The
    worker must outlive them all and every order end as the gateway's ledger says."""
    group.ensure_gateway()
    proxy = HostileGateway(group.env["GATEWAY_URL"])
    try:
        relay = Restartable(group, "relay", "run_outbox_relay")
        worker = {**FAST_RETRIES, "GATEWAY_URL": proxy.url, "GATEWAY_TIMEOUT": "3"}
        calls = Restartable(group, "gateway-calls", "run_gateway_calls", env=worker)  # before the consumers
        consumers = [Restartable(group, "consumers", "run_consumers", env=FAST_RETRIES) for _ in range(2)]
        seed_catalog(catalog=CATALOG)
        started = time.monotonic()
        load = OrderLoad(rng, tokens=GATEWAY_LIES + ["tok_visa"] * len(GATEWAY_LIES), cancel_share=0.3)
        load.run_while(lambda: True, max_orders=max_orders)
        exit_codes = _settle(group, [relay, calls, *consumers], load, quiet)
        if proxy.elsewhere.requests:
            raise AssertionError(f"a redirect was followed: {proxy.elsewhere.requests[:3]}")
        told = collections.Counter()
        for (order_id, kind), count in proxy.mangled.items():
            told[(proxy.mangles[order_id][0], kind)] += count
        injections = [
            Injection(time.monotonic() - started, f"the gateway answered a {kind} with {mangle!r}, {count} time(s)")
            for (mangle, kind), count in sorted(told.items())
        ]
        return Outcome(injections, load, exit_codes=exit_codes)
    finally:
        proxy.close()


def broker_restart(group: ProcessGroup, rng: random.Random, *, restarts: int, max_orders: int, quiet=180) -> Outcome:
    """``make chaos`` only: the whole broker stopped and started mid-load (it affects every vhost)."""
    relay = Restartable(group, "relay", "run_outbox_relay")
    consumers = [Restartable(group, "consumers", "run_consumers", env=FAST_RETRIES) for _ in range(2)]
    seed_catalog(catalog=CATALOG)
    load = OrderLoad(rng)
    injections = _run(rng, load, [faults.broker_restart] * restarts, max_orders=max_orders, interval=(2.0, 4.0))
    load.run_while(lambda: False, max_orders=max_orders, at_least=len(load.orders) + 10)  # after the restart
    return Outcome(injections, load, exit_codes=_settle(group, [relay, *consumers], load, quiet))


# Inside a batch: after one handler and before the next, and after every handler, before the
# batch's commit (a point only a batch of two or more reaches, unlike before_commit).
BATCH_POINTS = ["between_handlers", "before_batch_commit"]


def batch_kills(group: ProcessGroup, rng: random.Random, *, rounds: int, orders_per_round: int, quiet=120) -> Outcome:
    """A payments or inventory consumer SIGKILLed inside a batch, round after round.

    Each round stops the target, so that a backlog of its messages waits in its queue; places
    orders; then starts it with a fault point inside the batch it takes from that backlog
    (between two handlers, or before the batch's commit), SIGKILLs it there and starts it again.
    Every handler of the killed batch ran, and the payments ones charged the gateway, but none
    committed: the redeliveries must take effect once.
    """
    relay = Restartable(group, "relay", "run_outbox_relay")
    others = Restartable(group, "consumers", "run_consumers", "--except", "payments,inventory", env=FAST_RETRIES)
    targets = {
        name: Restartable(group, name, "run_consumers", name, env={**FAST_RETRIES, "CONSUMER_BATCH_SIZE": "50"})
        for name in ("payments", "inventory")
    }
    seed_catalog(catalog=CATALOG)
    load = OrderLoad(rng)
    injections, started = [], time.monotonic()
    for n in range(rounds):
        name = ["payments", "inventory"][n % 2] if rounds > 1 else "payments"
        point = BATCH_POINTS[(n // 2) % 2] if rounds > 2 else BATCH_POINTS[n % 2]
        target = targets[name]
        target.kill()
        before = _queue_depth(f"{name}_queue")
        for _ in range(orders_per_round):
            load.place(token="tok_visa")
        # inventory's messages come from payments, which keeps running: wait for the backlog
        _wait_for_depth(f"{name}_queue", before + orders_per_round, timeout=60)
        reached, description = target.kill_at(f"consumer.{name}.{point}", group.log_dir)
        injections.append(
            Injection(round(time.monotonic() - started, 2), f"{description} (a batch of its backlog)", reached)
        )
    return Outcome(injections, load, exit_codes=_settle(group, [relay, others, *targets.values()], load, quiet))


def _queue_depth(queue: str) -> int:
    with broker_connection() as conn:
        return Queue(queue, no_declare=True)(conn.default_channel).queue_declare(passive=True).message_count


def _wait_for_depth(queue: str, depth: int, timeout: float) -> None:
    wait_until(lambda: _queue_depth(queue) >= depth, timeout=timeout, message=f"{queue} to hold {depth} messages")


# --- poison ---------------------------------------------------------------------------------


def _headers(event_type: str | None, version=1) -> dict:
    headers = {"schema_version": version, "occurred_at": "2026-01-01T00:00:00+00:00"}
    if event_type:
        headers["event_type"] = event_type
    return headers


def _poison(queue: str, body: bytes, event_type: str | None, *, with_id: bool = True, version=1) -> str:
    """Publish straight into one consumer's queue, as a retry or a replay would; the message id used."""
    message_id = str(uuid.uuid4()) if with_id else ""
    publish_raw(
        queue,
        body,
        properties={"message_id": message_id} if message_id else {},
        headers=_headers(event_type, version),
        exchange="",
    )
    return message_id


# Each kind: (consumer, reason, how to make it). Covers every way a message can be unusable.
POISON_KINDS: list[tuple[str, str, Callable[[], str]]] = [
    ("payments", "undecodable_body", lambda: _poison("payments_queue", b"\xff\xfe{not json", "orders.order.created")),
    ("inventory", "undecodable_body", lambda: _poison("inventory_queue", b"[1, 2]", "orders.order.cancelled")),
    ("events", "missing_message_id", lambda: _poison("events_queue", as_json({}), "x.y.z", with_id=False)),
    ("orders", "missing_event_type", lambda: _poison("orders_queue", as_json({"order_id": str(uuid.uuid4())}), None)),
    (
        "payments",
        "invalid_schema_version",
        lambda: _poison("payments_queue", as_json(order_created_payload()), "orders.order.created", version="abc"),
    ),
    ("orders", "unknown_event_type", lambda: _poison("orders_queue", as_json({}), "orders.order.exploded")),
    (
        "inventory",
        "unsupported_schema_version",
        lambda: _poison("inventory_queue", as_json({}), "orders.order.cancelled", version=99),
    ),
    (
        "payments",
        "invalid_payload",
        lambda: _poison("payments_queue", as_json(order_created_payload(total="-5")), "orders.order.created"),
    ),
    (
        "orders",
        "invalid_payload",  # a reservation for an order that does not exist
        lambda: _poison(
            "orders_queue", as_json({"order_id": str(uuid.uuid4()), "items": []}), "inventory.stock.reserved"
        ),
    ),
    (
        "payments",
        "handler_error",  # a bug that raises on every attempt (its schema allows a token its table refuses)
        lambda: _poison(
            "payments_queue", as_json(order_created_payload(payment_token="t" * 300)), "orders.order.created"
        ),
    ),
]


def poison_past_delivery_limit() -> str:
    """A message that "crashes" the consumer on every delivery: requeued until RabbitMQ's limit.

    Quorum queues count every requeue; past ``x-delivery-limit`` the broker dead-letters it to
    ``payments_queue_dead_letters``, from which the consumer moves it to the dead-letter table.
    """
    message_id = _poison("payments_queue", as_json(order_created_payload()), "orders.order.created")
    with broker_connection() as conn:
        queue = Queue("payments_queue", no_declare=True)(conn.default_channel)
        for _ in range(100):
            message = queue.get(no_ack=False)
            if message is None:
                break
            message.requeue()
        else:
            raise AssertionError("the broker never dead-lettered the message")
    return message_id


def message_faults(
    kinds: list, rng: random.Random, copies: int, expected: list[ExpectedDeadLetter], label: str = "poison"
) -> list:
    """One fault per message of ``kinds`` (consumer, reason, how to make it), ``copies`` of each, in
    random order; each adds the dead letter it must become to ``expected``."""

    def inject(consumer, reason, make):
        def fault():
            expected.append(ExpectedDeadLetter(consumer, make(), reason))
            return f"{label} for {consumer}: {reason}"

        return fault

    kinds = kinds * copies
    rng.shuffle(kinds)
    return [inject(*kind) for kind in kinds]


def poison(group: ProcessGroup, rng: random.Random, *, copies: int, max_orders: int, quiet=120) -> Outcome:
    """Every kind of poison message, ``copies`` of each, injected at random among valid orders."""
    relay = Restartable(group, "relay", "run_outbox_relay")
    consumers = [Restartable(group, "consumers", "run_consumers", env=FAST_RETRIES) for _ in range(2)]
    seed_catalog(catalog=CATALOG)
    for consumer in consumers:  # RabbitMQ's own dead-lettering needs the queue to itself
        consumer.kill()
    expected = [ExpectedDeadLetter("payments", poison_past_delivery_limit(), "broker_delivery_limit")]
    for consumer in consumers:
        consumer.start()
    load = OrderLoad(rng)
    fault_list = message_faults(POISON_KINDS, rng, copies, expected)
    injections = _run(rng, load, fault_list, max_orders=max_orders, interval=(0.05, 0.4))
    injections.insert(0, Injection(0.0, "poison for payments: requeued past the delivery limit (before the load)"))
    return Outcome(injections, load, expected, exit_codes=_settle(group, [relay, *consumers], load, quiet))


# --- cancellations and deadlines ------------------------------------------------------------


def races(
    group: ProcessGroup,
    rng: random.Random,
    *,
    pauses: int,
    saga_timeout: float,
    cancel_share: float,
    max_orders: int,
    quiet=150,
) -> Outcome:
    """Cancellations fired at random moments, and orders passing their deadline mid-saga.

    One consumer process per context; the faults take one of them down for longer than the
    saga deadline, so the deadline fails the orders caught in that step while their events
    wait in the queue, to be handled late. ``tok_unavailable`` orders: the gateway worker tries
    their charge again and again while the deadline fails them, then gives it up.
    """
    relay = Restartable(group, "relay", "run_outbox_relay")
    retries = {**FAST_RETRIES, "CONSUMER_MAX_ATTEMPTS": "3"}
    contexts = {
        name: Restartable(group, f"consumers-{name.replace(' ', '-')}", "run_consumers", *name.split(), env=retries)
        for name in [*(c for c in consumers() if c not in ("orders", "events")), "orders events"]
    }
    deadline = Restartable(
        group, "deadline", "expire_pending_orders", "--loop", env={"SAGA_TIMEOUT": str(saga_timeout)}
    )
    seed_catalog(catalog=CATALOG)
    tokens = ["tok_visa"] * 6 + ["tok_chargeDeclined", "tok_timeout", "tok_unavailable"]
    load = OrderLoad(rng, tokens=tokens, cancel_share=cancel_share, cancel_within=2 * saga_timeout)
    down_for = saga_timeout * 2 + 1  # past the deadline, and past the loop's next check
    fault_list = [faults.pause(contexts[rng.choice(list(contexts))], down_for) for _ in range(pauses)]
    # Gaps between the outages let sagas complete too, and cancellations reach confirmed orders.
    injections = _run(rng, load, fault_list, max_orders=max_orders, interval=(1.5, 3.5))
    running = [relay, *contexts.values(), deadline]
    return Outcome(injections, load, [], exit_codes=_settle(group, running, load, quiet))


# --- everything at once ---------------------------------------------------------------------


def mixed(group: ProcessGroup, rng: random.Random, *, rounds: int, max_orders: int, quiet=240) -> Outcome:
    """``make chaos``: every fault at once, ``rounds`` of each kind, shuffled, with cancellations,
    poison and the deadline loop (a deadline long enough that only stalled sagas reach it). One
    order in 41 is paid with ``tok_hang``: its call holds one of the gateway worker's threads for
    ``GATEWAY_TIMEOUT`` (2 s here), and a kill, a cut or the deadline may strike meanwhile."""
    relays = [Restartable(group, "relay", "run_outbox_relay", "--batch-size", "10") for _ in range(2)]
    consumer_env = {**FAST_RETRIES, "GATEWAY_TIMEOUT": "2"}
    consumers = [Restartable(group, "consumers", "run_consumers", env=consumer_env) for _ in range(2)]
    deadline = Restartable(group, "deadline", "expire_pending_orders", "--loop", env={"SAGA_TIMEOUT": "15"})
    seed_catalog(catalog=CATALOG)
    load = OrderLoad(rng, tokens=SAFE_TOKENS * 4 + ["tok_hang"], cancel_share=0.2)
    expected: list[ExpectedDeadLetter] = []
    fault_list = [faults.kill_any(rng, relays), faults.kill_any(rng, consumers)] * rounds
    fault_list += [faults.kill_at(rng, relays, "relay.after_confirm", group.log_dir)] * rounds
    fault_list += [faults.kill_at(rng, consumers, rng.choice(CONSUMER_POINTS), group.log_dir) for _ in range(rounds)]
    fault_list += [faults.close_broker_connections, faults.terminate_database_backends] * rounds
    fault_list += [faults.kill_any(rng, [deadline])] * max(1, rounds // 2)
    fault_list += message_faults(POISON_KINDS, rng, 1, expected)
    rng.shuffle(fault_list)
    injections = _run(rng, load, fault_list, max_orders=max_orders, interval=(0.2, 1.2))
    running = [*relays, *consumers, deadline]
    return Outcome(injections, load, expected, exit_codes=_settle(group, running, load, quiet))
