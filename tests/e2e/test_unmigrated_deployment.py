"""A deployment whose database lacks some of its apps' migrations (the orchestrator switched on
after the database was prepared without it) refuses to run its workers, in one line naming
prepare_deployment, and /readyz says so: before, every orchestrated order was dead-lettered on a
missing table. On the embedded default (SQLite, the filesystem broker), in processes of their own."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]
REFUSAL = (
    "CommandError: the database lacks migrations of orchestrator: run `python manage.py prepare_deployment` "
    "for this deployment first"
)


def manage(var_dir: Path, *args: str, **environ: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "BROKER_URL", "ORCHESTRATOR", "SAGA_STYLE")}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env={**env, "DEBUG": "1", "VAR_DIR": str(var_dir), **environ},
        capture_output=True,
        text=True,
        timeout=120,
    )


READYZ = "from django.test import Client; r = Client().get('/readyz'); print(r.status_code, r.content.decode())"


@pytest.fixture(scope="module")
def prepared_without_the_orchestrator(tmp_path_factory) -> Path:
    var_dir = tmp_path_factory.mktemp("unmigrated")
    prepared = manage(var_dir, "prepare_deployment")
    assert prepared.returncode == 0, prepared.stderr
    return var_dir


@pytest.mark.parametrize(
    "worker",
    [
        ["run_outbox_relay", "--once"],
        ["run_consumers", "--once"],
        ["run_gateway_calls", "--once"],
        ["expire_pending_orders"],
    ],
)
def test_every_worker_refuses_to_start_naming_prepare_deployment(prepared_without_the_orchestrator, worker):
    refused = manage(prepared_without_the_orchestrator, *worker, ORCHESTRATOR="1")
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == REFUSAL
    started = manage(prepared_without_the_orchestrator, *worker)  # as it was prepared: it runs
    assert started.returncode == 0, started.stderr


def test_readyz_says_the_database_is_unmigrated_until_it_is_prepared(prepared_without_the_orchestrator):
    answered = manage(prepared_without_the_orchestrator, "shell", "-v", "0", "-c", READYZ, ORCHESTRATOR="1")
    status, body = answered.stdout.strip().split(" ", 1)
    assert (status, json.loads(body)) == ("503", {"database": "unmigrated", "broker": "ok"})

    assert manage(prepared_without_the_orchestrator, "prepare_deployment", ORCHESTRATOR="1").returncode == 0
    answered = manage(prepared_without_the_orchestrator, "shell", "-v", "0", "-c", READYZ, ORCHESTRATOR="1")
    status, body = answered.stdout.strip().split(" ", 1)
    assert (status, json.loads(body)) == ("200", {"database": "ok", "broker": "ok"})
