"""Hostile messages (issue 26, rows 1-5 and 12), published with py-amqp itself so every header
keeps the exact type it was given: each kind says the dead letter it must become.

``hostile`` mixes them into a load of genuine orders on the Procfile's two consumer processes:
none may stop a process, each must end as its dead letter, and the saga's invariants must hold.
"""

import json
import random
import sys
import uuid
from collections.abc import Callable
from contextlib import contextmanager

from django.db import connections
from reliable_messaging.hosting import installed
from reliable_messaging.models import InboxMessage, OutboxMessage

from faultlib.broker import publish_exact
from faultlib.faults import Restartable
from faultlib.invariants import ExpectedDeadLetter
from faultlib.load import CATALOG, OrderLoad, order_created_payload
from faultlib.processes import ProcessGroup, wait_until
from faultlib.saga import seed_catalog
from faultlib.scenarios import FAST_RETRIES, Outcome, _run, _settle, message_faults

CREATED = "orders.order.created"
YEAR_10000 = "9999-12-31T23:59:59-14:00"


def send(queue: str, body: bytes, *, event_type=CREATED, message_id: str | bytes | None = None, **headers) -> str:
    """Into ``queue`` through the default exchange, as a retry or a replay would arrive."""
    message_id = message_id if message_id is not None else str(uuid.uuid4())
    publish_exact(
        queue,
        body,
        headers={"event_type": event_type, "schema_version": 1, **headers},
        message_id=message_id,
        content_type="application/json",
    )
    return message_id if isinstance(message_id, str) else ""  # undecodable: stored without an id


def order_created(**overrides) -> bytes:
    return json.dumps(order_created_payload(**overrides)).encode()


@contextmanager
def deeper_recursion():
    """py-amqp encodes nested tables recursively: deep headers need room on the sender's side."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def deep_headers() -> str:
    nested: list = []
    for _ in range(3000):
        nested = [nested]
    with deeper_recursion():
        send("events_queue", order_created(), message_id=b"\xff", **{"x-deep": nested})
    return ""


def reused_id() -> str:
    """A genuine order's event, already charged, again under its id with another total.
    Runs in the injector's thread: its database connection is closed after, or it would keep
    the test database from being dropped."""
    try:
        return _reuse_a_charged_orders_id()
    finally:
        connections.close_all()  # this thread's connections only


def _reuse_a_charged_orders_id() -> str:
    wait_until(
        lambda: InboxMessage.objects.filter(consumer="payments", event_type=CREATED).exists(),
        timeout=60,
        message="a genuine order charged",
    )
    handled = InboxMessage.objects.filter(consumer="payments", event_type=CREATED).order_by("-id").first()
    row = OutboxMessage.objects.get(event_id=handled.message_id)
    forged = {**row.payload, "total": {"amount": "0.01", "currency": "USD"}}
    body = json.dumps(forged).encode()
    return send("payments_queue", body, message_id=handled.message_id, schema_version=row.schema_version)


def failing_charge_with_attempt(attempt) -> Callable[[], str]:
    return lambda: send("payments_queue", order_created(payment_token="tok_unavailable"), **{"x-attempt": attempt})


def into_dead_letter_queue(consumer: str, death) -> Callable[[], str]:
    return lambda: send(f"{consumer}_queue_dead_letters", order_created(), **{"x-death": death})


def year_10000() -> str:
    body = json.dumps({"order_id": str(uuid.uuid4())}).encode()
    return send("orders_queue", body, event_type="payments.payment.succeeded", occurred_at=YEAR_10000)


# A context that only follows the saga (shipping, where it is installed), else inventory: its consumer too.
FOLLOWER = next((d.name for d in installed() if d.extra.get("follows")), "inventory")

# (consumer, reason, how to make it): the message id it was sent with, "" when it has none.
HOSTILE_KINDS: list[tuple[str, str, Callable[[], str]]] = [
    *[("payments", "invalid_headers", failing_charge_with_attempt(a)) for a in ("abc", [1, 2], -10, 2**40)],
    ("payments", "invalid_payload", lambda: send("payments_queue", b"[" * 100_000)),
    ("events", "invalid_payload", lambda: send("events_queue", b"[" * 100_000)),
    ("payments", "broker_dead_lettered", into_dead_letter_queue("payments", "x")),
    ("inventory", "broker_dead_lettered", into_dead_letter_queue("inventory", [{"count": "abc"}])),
    (
        FOLLOWER,
        "broker_delivery_limit",
        into_dead_letter_queue(FOLLOWER, [{"count": 2**40, "reason": "delivery_limit"}]),
    ),
    ("orders", "invalid_headers", year_10000),
    ("payments", "invalid_headers", lambda: send("payments_queue", order_created(), message_id=b"\xff\xfe")),
    ("events", "invalid_headers", deep_headers),
    ("payments", "message_id_reused", reused_id),
]


def hostile(group: ProcessGroup, rng: random.Random, *, copies: int, max_orders: int, quiet=120) -> Outcome:
    """Every kind of hostile message, ``copies`` of each, among genuine orders, on the Procfile's
    two consumer processes (which must all still run at the end)."""
    relay = Restartable(group, "relay", "run_outbox_relay")
    consumers = [
        Restartable(group, "consumers", "run_consumers", "--except", "orders,events", env=FAST_RETRIES),
        Restartable(group, "orders-consumers", "run_consumers", "orders", "events", env=FAST_RETRIES),
    ]
    seed_catalog(catalog=CATALOG)
    load = OrderLoad(rng)
    expected: list[ExpectedDeadLetter] = []
    faults = message_faults(HOSTILE_KINDS, rng, copies, expected, "hostile message")
    injections = _run(rng, load, faults, max_orders=max_orders, interval=(0.05, 0.4))
    return Outcome(injections, load, expected, exit_codes=_settle(group, [relay, *consumers], load, quiet))
