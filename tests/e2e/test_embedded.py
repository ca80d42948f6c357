"""The embedded default (SQLite + kombu's filesystem broker) takes a checkout to CONFIRMED.

What `make run` starts on a machine with only Python: web, relay and consumers as separate
processes sharing var/. Short, so the embedded mode cannot rot.
"""

import json
import os
import sqlite3
import time
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

    # and returned: orders' return saga (docs/sagas.md) refunds it and puts its stock back
    returning = urllib.request.Request(f"{base}/api/orders/{order['id']}/return/", method="POST")
    with urllib.request.urlopen(returning, timeout=10) as response:
        assert (response.status, json.load(response)["status"]) == (202, "RETURNING")
    wait_until(
        lambda: (get_json(f"{base}/api/orders/{order['id']}/") or {}).get("status") == "RETURNED",
        timeout=90,
        message="the order to be returned",
    )
    ledger = embedded.run("gateway_ledger", "--order", order["id"])
    assert [(o["kind"], o["amount"]) for o in map(json.loads, ledger.stdout.splitlines())] == [
        ("charge", "39.98"),
        ("refund", "39.98"),
    ]
    wait_until(
        lambda: {p["sku"]: p["available"] for p in get_json(f"{base}/api/products/")}["WIDGET"] == 1000,
        timeout=30,
        message="the storefront to show the stock back",
    )
    assert [embedded.stop(p) for p in (relay, consumers)] == [0, 0]
    embedded.stop(web)


def post_checkout(base: str, token: str) -> tuple[dict, float]:
    """A checkout through the API: the order and how long the answer took."""
    request = urllib.request.Request(
        f"{base}/api/checkout/",
        data=json.dumps(
            {"customer_id": "bob", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": token}
        ).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": str(uuid.uuid4())},
        method="POST",
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201
        return json.load(response), time.monotonic() - started


def test_hung_gateway_calls_in_flight_hold_no_write_lock(embedded, tmp_path):
    # given the embedded mode with its fake gateway and the gateway worker (started with the consumers)
    for args in (["migrate", "-v0"], ["migrate", "--database", "gateway", "-v0"], ["seed_catalog"]):
        result = embedded.run(*args)
        assert result.returncode == 0, result.stderr
    worker = {"GATEWAY_TIMEOUT": "30"}  # longer than this test: the calls stay hung
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    embedded.start("web", "runserver", f"127.0.0.1:{port}", "--noreload")
    embedded.start("relay", "run_outbox_relay")
    embedded.start("consumers", "run_consumers", env=worker)
    wait_until(lambda: len(get_json(f"{base}/api/products/") or []) == 4, timeout=60, message="the storefront")

    # when 3 orders paid with tok_hang have their calls in the air
    hung = [post_checkout(base, "tok_hang")[0]["id"] for _ in range(3)]
    database = sqlite3.connect(tmp_path / "var" / "db.sqlite3", timeout=10)
    in_air = "SELECT count(*) FROM payments_payment WHERE status = 'charging' AND call_attempts >= 1"
    wait_until(lambda: database.execute(in_air).fetchone()[0] == 3, timeout=30, message="3 hung calls in the air")

    # then 20 more checkouts are each answered within 10 s (one waiting for a hung call would take its
    # 30 s; a busy machine, a second or two) and confirmed, while those calls hang
    placed = [post_checkout(base, "tok_visa") for _ in range(20)]
    assert [seconds < 10 for _, seconds in placed] == [True] * 20, [round(s, 2) for _, s in placed]
    for order, _ in placed:
        wait_until(
            lambda o=order: (get_json(f"{base}/api/orders/{o['id']}/") or {}).get("status") == "CONFIRMED",
            timeout=30,
            message=f"order {order['id']} to be confirmed",
        )
    assert database.execute(in_air).fetchone()[0] == 3  # still hung: nothing waited for them
    assert {(get_json(f"{base}/api/orders/{h}/") or {}).get("status") for h in hung} == {"PENDING"}
    database.close()
