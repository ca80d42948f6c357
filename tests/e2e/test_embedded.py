"""The embedded default (SQLite + kombu's filesystem broker) takes a checkout to CONFIRMED.

What `make run` starts on a machine with only Python: web, relay and consumers as separate
processes sharing var/. Short, so the embedded mode cannot rot.
"""

import json
import os
import urllib.error
import urllib.request
import uuid

import pytest

from faultlib.processes import ProcessGroup, free_port, wait_until

pytestmark = pytest.mark.embedded


def get_json(url: str):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)
    except (urllib.error.URLError, ConnectionError):
        return None


@pytest.fixture
def embedded(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "BROKER_URL", "TEST_DATABASE_NAME"}}
    env.update({"DEBUG": "1", "VAR_DIR": str(tmp_path / "var"), "RELAY_POLL_INTERVAL": "0.2", "PYTHONUNBUFFERED": "1"})
    group = ProcessGroup(tmp_path, env)
    yield group
    group.stop_all()
    print(group.logs())


def test_a_checkout_is_confirmed_on_sqlite_and_the_filesystem_broker(embedded):
    for args in (["migrate", "-v0"], ["migrate", "--database", "gateway", "-v0"], ["seed_catalog"]):
        result = embedded.run(*args)
        assert result.returncode == 0, result.stderr
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    web = embedded.start("web", "runserver", f"127.0.0.1:{port}", "--noreload")
    relay = embedded.start("relay", "run_outbox_relay")
    consumers = embedded.start("consumers", "run_consumers")
    wait_until(lambda: len(get_json(f"{base}/api/products/") or []) == 4, timeout=60, message="the storefront")

    request = urllib.request.Request(
        f"{base}/api/checkout/",
        data=json.dumps(
            {"customer_id": "alice", "items": [{"sku": "WIDGET", "quantity": 2}], "payment_token": "tok_visa"}
        ).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": str(uuid.uuid4())},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        order = json.load(response)
    wait_until(
        lambda: (get_json(f"{base}/api/orders/{order['id']}/") or {}).get("status") == "CONFIRMED",
        timeout=60,
        message="the order to be confirmed",
    )

    ledger = embedded.run("gateway_ledger", "--order", order["id"])
    assert [json.loads(line)["kind"] for line in ledger.stdout.splitlines()] == ["charge"]
    assert json.loads(ledger.stdout)["amount"] == "39.98"
    products = {p["sku"]: p["available"] for p in get_json(f"{base}/api/products/")}
    wait_until(
        lambda: {p["sku"]: p["available"] for p in get_json(f"{base}/api/products/")}["WIDGET"] == 998,
        timeout=30,
        message="the storefront to show the reservation",
    )
    assert products.keys() == {"WIDGET", "GADGET", "GIZMO", "LIMITED-PRINT"}
    assert [embedded.stop(p) for p in (relay, consumers)] == [0, 0]
    embedded.stop(web)
