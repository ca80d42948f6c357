"""Settings that cannot work together are refused at start-up, in one line, before any order is
taken: every command of the deployment exits non-zero naming what to change."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]


def check(**environ: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SAGA_STYLE", "ORCHESTRATOR", "EVENT_VERSIONS")}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=BASE_DIR,
        env={**env, "DEBUG": "1", **environ},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_orchestration_with_the_order_created_event_pinned_to_v1_is_refused():
    done = check(SAGA_STYLE="orchestration", EVENT_VERSIONS="orders.order.created=1")
    assert done.returncode != 0
    assert (
        "SAGA_STYLE=orchestration needs orders.order.created v2 (v1 carries no saga style), but EVENT_VERSIONS "
        "pins it to v1: finish the rollout of v2 first, or keep the choreography"
    ) in done.stderr


@pytest.mark.parametrize(
    "environ",
    [
        {"SAGA_STYLE": "orchestration", "EVENT_VERSIONS": "orders.order.created=2"},
        {"SAGA_STYLE": "choreography", "EVENT_VERSIONS": "orders.order.created=1"},
    ],
)
def test_the_combinations_that_work_start(environ):
    done = check(**environ)
    assert done.returncode == 0, done.stderr
