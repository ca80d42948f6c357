"""The log recipe in docs/operations.md, run as printed on the two shapes of log it names: `make run`'s
one file whose every line honcho prefixes, and a supervisor's one unprefixed file per process."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from django.conf import settings

ORDER = "0b8f7e4e-2f36-4d6f-9a51-1d6c3c9b7a10"
OTHER = "11111111-2222-4333-8444-555555555555"
OPERATIONS = Path(settings.BASE_DIR) / "docs" / "operations.md"


def line(consumer: str, event_type: str, event: str, order: str) -> str:
    at = "2026-11-25T20:36:52.123456Z"
    fields = {"consumer": consumer, "event_type": event_type, "correlation_id": order, "event": event}
    return json.dumps({**fields, "level": "info", "timestamp": at})


def recipes() -> list[str]:
    """The grep pipelines of the Logs section, in order."""
    logs = OPERATIONS.read_text().split("\n## Logs\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^grep -h .*$", logs, flags=re.MULTILINE)


EXPECTED = [
    {
        "timestamp": "2026-11-25T20:36:52.123456Z",
        "consumer": "payments",
        "event_type": "orders.order.created",
        "event": "handled",
    },
    {
        "timestamp": "2026-11-25T20:36:52.123456Z",
        "consumer": "orders",
        "event_type": "payments.payment.succeeded",
        "event": "handled",
    },
]


def run(recipe: str, cwd: Path) -> list[dict]:
    done = subprocess.run(
        ["bash", "-c", recipe], cwd=cwd, env={"PATH": "/usr/bin:/bin", "ORDER": ORDER}, capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (0, "")
    return [json.loads(out) for out in done.stdout.splitlines()]


@pytest.mark.skipif(shutil.which("jq") is None, reason="the recipe needs jq (apt-get install jq)")
def test_the_recipe_follows_one_order_through_make_runs_output_and_a_supervisors_files(tmp_path):
    make_run, supervisor = recipes()
    (tmp_path / "shop.log").write_text(
        "20:36:50 system             | consumers.1 started (pid=4242)\n"
        f"20:36:52 consumers.1        | {line('payments', 'orders.order.created', 'handled', ORDER)}\n"
        f"20:36:52 consumers.1        | {line('payments', 'orders.order.created', 'handled', OTHER)}\n"
        f"20:36:52 orders-consumers.1 | {line('orders', 'payments.payment.succeeded', 'handled', ORDER)}\n"
        f"20:36:53 web.1              | not JSON, yet about {ORDER}\n"
    )
    folder = tmp_path / "var-log-shop"
    folder.mkdir()
    (folder / "consumers.log").write_text(line("payments", "orders.order.created", "handled", ORDER) + "\n")
    (folder / "orders-consumers.log").write_text(
        line("orders", "payments.payment.succeeded", "handled", ORDER)
        + "\n"
        + line("orders", "payments.payment.succeeded", "handled", OTHER)
        + "\n"
    )

    assert run(make_run, tmp_path) == EXPECTED
    assert run(supervisor.replace("/var/log/shop/", f"{folder}/"), tmp_path) == EXPECTED
