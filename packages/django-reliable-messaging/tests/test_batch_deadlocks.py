"""A batch that loses PostgreSQL deadlocks, forced step by step rather than left to timing.

Two notes decided in one batch by the archive's handlers (swapped here for ones that lock rows):
``x`` wants a unit of the tally HOT-A, ``y`` one of HOT-B. The first attempt takes them in one
run: both notes' filed rows, then the tallies; the second takes each member as a run of one in
its savepoint, ``x`` first (a batch goes in correlation-id order). A rival transaction, standing for
another consumer's batch, holds HOT-B and asks for what the batch holds: when the batch then
asks for HOT-B, the circle closes.

PostgreSQL looks for a deadlock once per lock wait, ``deadlock_timeout`` (1 s) after the wait
began, and fails the statement of the backend that finds one. Two things make that backend the
batch's, every time: the rival never looks (its ``deadlock_timeout`` is an hour), and the
batch's wait for HOT-B begins only after the rival's wait. For the second, a third session,
the gate, holds ``y``'s filed row, which the batch locks just before HOT-B, and lets go
once the rival waits. Each step waits for the lock wait it needs (``pg_blocking_pids``), never
for a clock.
"""

import json
import logging
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor

import psycopg
import pytest
from archive.models import Filed, Tally
from django.db import connection, connections
from django.db.models import F
from reliable_messaging import _registry as registry
from reliable_messaging._dispatch import Delivery, Outcome, decide_batch
from reliable_messaging.api import in_runs, in_turn, publish
from reliable_messaging.models import InboxMessage, OutboxMessage

from conftest import database_url, wait_until

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks: PostgreSQL's"),
    pytest.mark.django_db(transaction=True),
]

EVENT = "notes.note.written"
WAIT = 30  # seconds: the bound of every step, far beyond the 1 s a deadlock takes to be found
HOT = {"HOT-A": uuid.UUID(int=1), "HOT-B": uuid.UUID(int=2)}  # the tallies' keys
LOCK_TALLY = "SELECT 1 FROM archive_tally WHERE note_id = %s FOR UPDATE"
LOCK_FILED = "SELECT 1 FROM archive_filed WHERE note_id = %s FOR UPDATE"


def take(event) -> None:
    """A unit of the tally the note names (its text), the note marked, and the note filed said."""
    note_id = event.payload["note_id"]
    Tally.objects.select_for_update().get(pk=HOT[event.payload["text"]])
    Tally.objects.filter(pk=HOT[event.payload["text"]]).update(attempts=F("attempts") - 1)
    Filed.objects.filter(note_id=note_id).update(text="taken")
    filed = {"note_id": note_id, "filed": 1}
    publish(event_type="archive.note.filed", payload=filed, aggregate_type="note", aggregate_id=note_id)


# The second attempt starts once the rival holds x's filed row. The first attempt's rollback frees
# the row with the rival waiting for it, but PostgreSQL queues no one for a row that looks free: on
# a busy machine the batch's next transaction can take it before the rival wakes, and the steps
# below would wait for a lock wait that never comes.
SECOND_ATTEMPT = threading.Event()


@in_runs
def take_notes(events) -> None:
    if len(events) == 1:  # a member in its savepoint, or alone: the second attempt or later
        assert SECOND_ATTEMPT.wait(WAIT), "the test never let the second attempt start"
    for event in events:  # every member's filed row first, then the tallies
        Filed.objects.select_for_update().get(note_id=event.payload["note_id"])
    for event in events:
        with in_turn(event):
            take(event)


@pytest.fixture(autouse=True)
def handlers(monkeypatch):
    SECOND_ATTEMPT.clear()
    spec = registry.HandlerSpec("archive", EVENT, take_notes, (1,))
    monkeypatch.setitem(registry._handlers, "archive", {EVENT: spec})


class Session:
    """A connection of its own, one transaction until it rolls back. Its statements run in turn
    on a thread of its own, so one waiting for a lock (``start``) leaves the test free."""

    def __init__(self, name: str) -> None:
        self.connection = psycopg.connect(database_url(), application_name=name)
        self.pid = self.connection.info.backend_pid
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=name)

    def start(self, sql: str, *params) -> Future:
        return self._thread.submit(self.connection.execute, sql, params or None)

    def run(self, sql: str, *params) -> None:
        self.start(sql, *params).result(timeout=WAIT)

    def rollback(self) -> None:
        self._thread.submit(self.connection.rollback).result(timeout=WAIT)

    def close(self) -> None:
        self.connection.cancel_safe()  # a statement still waiting (the test failed) gives up
        self._thread.shutdown(cancel_futures=True)
        self.connection.close()


class BatchInThread:
    """``decide_batch`` on a thread, and so a connection, of its own; ``pid``: its backend."""

    def __init__(self, deliveries: list[Delivery]) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="batch")
        self.pid = self._thread.submit(self._backend_pid).result(timeout=WAIT)
        self.decisions = self._thread.submit(self._decide, deliveries)
        self._thread.shutdown(wait=False)  # nothing more to run; it ends with the batch

    @staticmethod
    def _backend_pid() -> int:
        with connection.cursor() as cursor:
            # The batch is the one that checks, and so the loser: soon, whatever the server's setting.
            cursor.execute("SET deadlock_timeout = '100ms'")
            cursor.execute("SELECT pg_backend_pid()")
            return cursor.fetchone()[0]

    @staticmethod
    def _decide(deliveries: list[Delivery]):
        try:
            return decide_batch(deliveries)
        finally:
            connections.close_all()


@pytest.fixture
def rival():
    session = Session("rival")
    yield session
    session.close()


@pytest.fixture
def gate():
    session = Session("gate")
    yield session
    session.close()


def waits_for(waiting: int, holder: int, what: str) -> None:
    """Wait until ``waiting`` waits for a lock that ``holder`` holds, and nobody else does."""

    def blocked() -> set[int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [holder])
            return {pid for (pid,) in cursor.fetchall()}

    wait_until(lambda: blocked() == {waiting}, timeout=WAIT, interval=0.02, message=what)


def delivery(note_id: str, tally: str) -> Delivery:
    """A notes.note.written v1 message for one unit of ``tally``."""
    payload = {"note_id": note_id, "text": tally}
    return Delivery(
        consumer="archive",
        body=json.dumps(payload).encode(),
        properties={"message_id": f"msg-{note_id}", "correlation_id": note_id},
        headers={"event_type": EVENT, "schema_version": 1, "occurred_at": "2026-01-01T00:00:00+00:00"},
        routing_key=EVENT,
    )


def test_a_batch_that_loses_deadlocks_decides_each_loser_again_and_every_member_once(rival, gate, caplog):
    caplog.set_level(logging.INFO, logger="reliable_messaging.dispatch")
    Tally.objects.bulk_create([Tally(note_id=HOT["HOT-A"], attempts=10), Tally(note_id=HOT["HOT-B"], attempts=10)])
    x, y = sorted(str(uuid.uuid4()) for _ in range(2))
    for note_id in (x, y):  # as the notes' own would be, for the rival and the gate to lock
        Filed.objects.create(note_id=note_id, text="")
    rival.run("SET deadlock_timeout = '1h'")
    rival.run(LOCK_TALLY, HOT["HOT-B"])
    rival.run("SAVEPOINT wants_more")
    gate.run(LOCK_FILED, y)

    # 1. The first attempt, one run, no savepoints: x's filed row taken, y's waits at the gate.
    batch = BatchInThread([delivery(x, "HOT-A"), delivery(y, "HOT-B")])
    waits_for(batch.pid, gate.pid, "the run handler to wait at the gate, holding x's filed row")
    wants_x = rival.start(LOCK_FILED, x)
    waits_for(rival.pid, batch.pid, "the rival to wait for x's filed row")
    gate.rollback()  # the batch takes HOT-A, asks for HOT-B: the circle closes, and the batch finds it
    wants_x.result(timeout=WAIT)  # granted: the whole first attempt rolled back

    # 2. The second attempt, a savepoint per member: x waits for its filed row, then y at the gate.
    gate.run(LOCK_FILED, y)
    SECOND_ATTEMPT.set()
    waits_for(batch.pid, rival.pid, "x, in its savepoint, to wait for its filed row")
    rival.run("ROLLBACK TO SAVEPOINT wants_more")  # x's filed row given back, HOT-B kept
    waits_for(batch.pid, gate.pid, "y, in its savepoint, to wait at the gate, x holding HOT-A")
    wants_a = rival.start(LOCK_TALLY, HOT["HOT-A"])
    waits_for(rival.pid, batch.pid, "the rival to wait for HOT-A")
    gate.rollback()  # the circle closes again: y's savepoint rolls back, x stays in the batch
    wants_a.result(timeout=WAIT)  # granted: the batch committed x

    # 3. The rival ends, and y, decided alone after the commit, takes HOT-B.
    rival.rollback()
    decisions = batch.decisions.result(timeout=WAIT)

    assert [d.outcome for d in decisions] == [Outcome.HANDLED, Outcome.HANDLED]
    assert sorted(Tally.objects.values_list("note_id", "attempts")) == [(HOT["HOT-A"], 9), (HOT["HOT-B"], 9)]
    assert sorted(Filed.objects.values_list("note_id", "text")) == [(uuid.UUID(x), "taken"), (uuid.UUID(y), "taken")]
    inbox = InboxMessage.objects.filter(consumer="archive").values_list("message_id", flat=True)
    assert sorted(inbox) == [f"msg-{x}", f"msg-{y}"]
    filed = OutboxMessage.objects.filter(event_type="archive.note.filed")
    assert sorted(filed.values_list("aggregate_id", flat=True)) == [x, y]
    # Each deadlock was lost where it was forced: the first attempt (all of it again, in
    # savepoints), then y's savepoint (y alone, after the batch's commit).
    said = [(r.getMessage().splitlines()[0], getattr(r, "message_id", None)) for r in caplog.records]
    assert [line for line in said if "deadlock" in line[0]] == [
        ("a member of the batch failed: the batch again, each member in its savepoint: deadlock detected", None),
        ("deadlock inside a batch: decided again alone", f"msg-{y}"),
    ]
