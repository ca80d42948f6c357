"""Payments reads the gateway's ledger through its HTTP API (``GET /v1/ledger``), as it knows the
gateway by nothing else: each entry believed only when it reads as money moved for an order."""

import json
import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from payments.gateway import LedgerEntry, UnbelievableAnswer
from payments.gateway_client import HttpGateway

CHARGE = {
    "id": "ch_1",
    "object": "charge",
    "amount": 1250,
    "currency": "usd",
    "status": "succeeded",
    "idempotency_key": "charge-o1",
    "metadata": {"order_id": "o1"},
}


@pytest.fixture
def gateway_answering():
    """A gateway whose ledger answers what the test sets; the paths it was asked for."""
    answer: dict = {"data": []}
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = HttpGateway(f"http://127.0.0.1:{server.server_address[1]}", timeout=5, pool_size=2)
    yield client, answer, asked
    server.shutdown()
    server.server_close()


def test_the_ledger_is_read_as_the_money_moved_per_order(gateway_answering):
    client, answer, asked = gateway_answering
    refund = {**CHARGE, "id": "re_2", "object": "refund", "idempotency_key": "refund-o1"}
    answer["data"] = [CHARGE, refund]
    assert client.ledger(order_id="o1") == [
        LedgerEntry(order_id="o1", kind="charge", amount=Decimal("12.50"), currency="USD", idempotency_key="charge-o1"),
        LedgerEntry(order_id="o1", kind="refund", amount=Decimal("12.50"), currency="USD", idempotency_key="refund-o1"),
    ]
    assert asked == ["/v1/ledger?order_id=o1"]


@pytest.mark.parametrize(
    "entry",
    [
        {**CHARGE, "object": "payout"},
        {**CHARGE, "amount": "12.50"},
        {**CHARGE, "metadata": None},
        "ch_1",
    ],
    ids=["another-object", "amount-not-minor-units", "no-order", "not-an-object"],
)
def test_an_entry_that_is_not_money_moved_for_an_order_is_not_believed(gateway_answering, entry):
    client, answer, _ = gateway_answering
    answer["data"] = [CHARGE, entry]
    with pytest.raises(UnbelievableAnswer):
        client.ledger()
