"""The orchestrator switched off after it ran: prepare_deployment unbinds its queue, which would
otherwise stay bound and grow for ever (no consumer); what it holds stays for an operator. On
RabbitMQ (the test's vhost, an exchange of this test's own), SQLite for the deployment."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from faultlib.broker import connection, publish_raw

BASE_DIR = Path(__file__).resolve().parents[2]
DEADLINE = "orchestrator.step.deadline"  # bound to the orchestrator's queue alone


def prepare(var_dir: Path, exchange: str, **environ: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "ORCHESTRATOR", "SAGA_STYLE")}
    done = subprocess.run(
        [sys.executable, "manage.py", "prepare_deployment"],
        cwd=BASE_DIR,
        env={**env, "DEBUG": "1", "VAR_DIR": str(var_dir), "MESSAGING_EXCHANGE": exchange, **environ},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def depth() -> int:
    with connection() as conn:
        return conn.default_channel.queue_declare("orchestrator_queue", passive=True).message_count


@pytest.fixture
def exchange():
    name = f"test_switched_off_{uuid.uuid4().hex[:8]}"
    yield name
    with connection() as conn:
        channel = conn.default_channel
        channel.queue_purge("orchestrator_queue")
        channel.exchange_delete(name)


def test_switching_the_orchestrator_off_unbinds_its_queue_and_keeps_what_it_holds(tmp_path, exchange):
    assert "unbound" not in prepare(tmp_path, exchange, ORCHESTRATOR="1")
    before = depth()
    publish_raw(DEADLINE, b"{}", exchange=exchange)
    assert depth() == before + 1

    said = prepare(tmp_path, exchange)  # off, as after the orchestrated sagas finished
    assert (
        "orchestrator_queue unbound: the orchestrator is off (ORCHESTRATOR); what the queue holds stays for an "
        "operator to read or purge"
    ) in said
    publish_raw(DEADLINE, b"{}", exchange=exchange)
    assert depth() == before + 1  # nothing more arrives; what was there stays

    assert "unbound" not in prepare(tmp_path, exchange, ORCHESTRATOR="1")  # on again: bound again
    publish_raw(DEADLINE, b"{}", exchange=exchange)
    assert depth() == before + 2
