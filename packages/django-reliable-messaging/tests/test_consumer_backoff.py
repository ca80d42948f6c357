"""How long a consumer waits before it connects again: the backoff grows with failures in a row
and starts over once the broker and the database are seen working.

A consumer runs for weeks: if its failures added up over its lifetime, every outage after the
seventh would keep it away for 30 s however short the outage.
"""

import pytest
from reliable_messaging import _consumer as consumer_module
from reliable_messaging._consumer import ConsumerWorker, DatabaseDown
from reliable_messaging._lifecycle import Stopper

CUT, DATABASE_DOWN, QUIET, BATCH = "cut", "database down", "quiet", "batch"


class RecordingStopper(Stopper):
    """Records each sleep instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


class ScriptedConnection:
    """A broker connection whose ``drain_events`` plays a script, one step per call; then stops the worker."""

    def __init__(self, steps: list[str], worker: ConsumerWorker) -> None:
        self.steps, self.worker = list(steps), worker

    def drain_events(self, timeout: float) -> None:
        if not self.steps:
            self.worker.stopper.stopping = True
            raise TimeoutError
        step = self.steps.pop(0)
        if step == BATCH:
            self.worker._arrived.append(("archive", "a message"))  # then the loop decides it
            return
        if step == CUT:
            raise ConnectionResetError("connection cut")
        if step == DATABASE_DOWN:
            raise DatabaseDown("terminated")
        raise TimeoutError  # QUIET: nothing delivered, the connection answers


class ScriptedSession:
    heartbeat = 0
    amqp = False

    def __init__(self, connection: ScriptedConnection) -> None:
        self.connection = connection

    def errors(self) -> tuple[type[BaseException], ...]:
        return (OSError,)

    def heartbeat_check(self) -> None:
        pass


class ScriptedWorker(ConsumerWorker):
    """The real loop and backoff; the broker connection replaced by the script."""

    def __init__(self, steps: list[str]) -> None:
        super().__init__(["archive"], stopper=RecordingStopper(), batch_size=1)  # one delivery, one batch
        self.session = ScriptedSession(ScriptedConnection(steps, self))
        self.batches = 0

    def _connect(self) -> None:
        pass

    def _disconnect(self, *, graceful: bool = True) -> None:
        pass

    def _handle_batch(self) -> None:
        self._arrived.clear()  # decided and settled
        self.batches += 1


@pytest.fixture(autouse=True)
def database_answers(monkeypatch):
    monkeypatch.setattr(consumer_module, "database_reachable", lambda: True)


def waits(steps: list[str], *, batches: int = 0) -> list[float]:
    worker = ScriptedWorker(steps)
    assert worker.run() == 0
    assert worker.batches == batches
    return worker.stopper.slept


def test_failures_in_a_row_double_the_wait():
    slept = waits([CUT, CUT, DATABASE_DOWN, CUT])

    # jittered down by at most a quarter: 0.5, 1, 2, 4 s
    assert len(slept) == 4
    for wait, full in zip(slept, [0.5, 1.0, 2.0, 4.0], strict=True):
        assert 0.75 * full <= wait <= full


def test_a_connection_seen_working_starts_the_next_wait_from_the_shortest():
    # seven outages, each after a while of working: without the reset the seventh would wait 30 s
    slept = waits([CUT, QUIET, DATABASE_DOWN, QUIET, CUT, QUIET, CUT, QUIET, DATABASE_DOWN, QUIET, CUT, QUIET, CUT])

    assert len(slept) == 7
    assert all(0.375 <= wait <= 0.5 for wait in slept), slept


def test_a_batch_decided_starts_the_next_wait_from_the_shortest():
    # a busy consumer never waits in vain for a delivery: its batches show that everything works
    slept = waits([CUT, BATCH, CUT, BATCH, DATABASE_DOWN, BATCH, CUT, BATCH, CUT, BATCH, CUT, BATCH, CUT], batches=6)

    assert len(slept) == 7
    assert all(0.375 <= wait <= 0.5 for wait in slept), slept


def test_the_wait_is_capped_at_thirty_seconds():
    slept = waits([CUT] * 9)

    assert len(slept) == 9
    assert 0.75 * 30 <= slept[-1] <= 30
    assert 0.75 * 30 <= slept[-2] <= 30


def test_a_database_down_is_probed_at_least_every_five_seconds(monkeypatch):
    # a failover takes seconds: a consumer must not sleep 16 s more after the new primary answers
    probes = iter([False] * 7 + [True])
    monkeypatch.setattr(consumer_module, "database_reachable", lambda: next(probes))
    slept = waits([DATABASE_DOWN])

    assert len(slept) == 8
    for wait, full in zip(slept, [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0], strict=True):
        assert 0.75 * full <= wait <= full
