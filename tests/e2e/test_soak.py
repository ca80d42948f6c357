"""The short soak: 32 concurrent clients against ``make run``'s web server on PostgreSQL.

``make soak`` runs the long one (64 clients, 5 minutes, through gunicorn and ``runserver``);
this is the same program, shorter: no 5xx, no broken connection, every process within its
database connection bound and the whole stack within 40, memory flat after the warm-up, the
saga backlog drained and every process exiting 0.
"""

import json
import os
import subprocess
import sys
import uuid

from faultlib.faults import rabbitmqctl
from faultlib.processes import BASE_DIR


def test_32_clients_against_make_runs_server_get_no_5xx_and_connections_stay_bounded(tmp_path):
    vhost = f"{os.environ['TEST_BROKER_VHOST']}_soak_{uuid.uuid4().hex[:6]}"  # its queues apart from the suite's
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        out = tmp_path / "soak.json"
        result = subprocess.run(
            [
                sys.executable,
                "bench/soak.py",
                "--clients",
                "32",
                "--seconds",
                "20",
                "--modes",
                "runserver",
                "--json",
                str(out),
            ],
            cwd=BASE_DIR,
            env={
                **os.environ,
                "BROKER_URL": f"amqp://guest:guest@127.0.0.1:5672/{vhost}",
                # The pool's 3 s wait sheds load (503) when the database does not answer; on a machine
                # this busy (two suites and two CPU hogs: 2 x 503 at p99 3.9 s) 32 clients queue for
                # 4 connections longer than that. A leaked connection still shows: the pool stays
                # short for good, and every request after it waits its 10 s and gets 503.
                "DATABASE_POOL_TIMEOUT": "10",
            },
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        rabbitmqctl("delete_vhost", vhost)
    print(result.stdout, result.stderr[-3000:])
    assert result.returncode == 0
    [run] = json.loads(out.read_text())
    assert run["failures"] == []
    assert run["errors"] == {}
    # It ran: every client several times over. A floor, not a speed (273 requests in 20 s on the
    # busiest machine seen); make bench holds the speed targets.
    assert run["requests"] >= 32 * 3
    assert {key.split()[1] for key in run["statuses"]} <= {"200", "201", "202", "409"}
    assert run["statuses"]["checkout 201"] >= 32 * 2
    bounds = run["connection_bounds"]
    assert all(run["connections"][role] <= bound for role, bound in bounds.items())
    assert run["connections_total"] <= sum(bounds.values()) <= 40
    assert run["exit_codes"] == {
        "gateway": 0,
        "web": 0,
        "relay": 0,
        "consumers": 0,
        "orders-consumers": 0,
        "deadline": 0,
        "gateway-calls": 0,
    }
