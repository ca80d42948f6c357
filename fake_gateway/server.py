"""The fake card gateway as an HTTP service of its own (``manage.py run_fake_gateway``, the Procfile's
``gateway``), Stripe-shaped, over the ledger and rules of ``fake_gateway/ledger.py``.

    POST /v1/charges       {"amount": 1250, "currency": "usd", "source": "tok_visa", "metadata": {"order_id": ...}}
    POST /v1/refunds       {"charge": "ch_12", "amount": 1250}
    GET  /v1/operations/K  the charge or refund made under idempotency key K (404: none)
    GET  /v1/ledger        the money moved ({"data": [...]}, oldest first; ?order_id= for one order)
    GET  /healthz

Charges and refunds need an ``Idempotency-Key`` header: the same key answers the first result and
moves no more money; the same key with other parameters is a ``400 idempotency_error``. Amounts are
integers in the currency's minor unit. A decline is ``402`` (``card_error`` with the decline code and
the charge's id), an unavailable gateway ``503`` (nothing happened).

The pace of a real gateway: each answer waits a lognormal time whose median is
``FAKE_GATEWAY_LATENCY`` ms (p99 about 6x the median), and a share ``FAKE_GATEWAY_TIMEOUT_RATE`` of
operations is done but never answered. The test tokens keep their meaning: ``tok_timeout``'s first
answer is lost (the connection closes), ``tok_slow`` answers after ``FAKE_GATEWAY_DELAY`` s,
``tok_hang`` never answers (the request is held until the caller gives up and closes its socket).
"""

import json
import logging
import math
import random
import select
import socket
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from fake_gateway import ledger as fake_ledger
from fake_gateway.conf import setting
from fake_gateway.ledger import KeyReused, NotRefundable, Unavailable, operation_id, slow_delay
from fake_gateway.models import GatewayOperation

logger = logging.getLogger(__name__)

# p99 of a lognormal is median * exp(2.326 * sigma): sigma = ln(6) / 2.326 puts it at 6x the median.
LATENCY_SIGMA = math.log(6) / 2.3263
# The longest a hung request holds its thread when the caller never closes its socket.
HANG_LIMIT = 3600.0


class Unanswered(Exception):
    """The operation is done; its answer never comes (``hang``) or its connection drops (``drop``)."""

    def __init__(self, how: str):
        self.how = how


class Delayed(Exception):
    """The operation is done; its answer leaves ``seconds`` later (``tok_slow``)."""

    def __init__(self, status: int, body: dict, seconds: float):
        self.status, self.body, self.seconds = status, body, seconds


# The storage's work runs on these few threads, each with its database connection kept: the
# request threads only wait (latency, hangs), so the service holds STORAGE_THREADS connections
# however many calls are in the air, and opens none per call.
STORAGE_THREADS = 4
storage = ThreadPoolExecutor(max_workers=STORAGE_THREADS, thread_name_prefix="gateway-storage")


def to_minor(amount: Decimal) -> int:
    return int((amount * 100).to_integral_value())


def from_minor(value) -> Decimal:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError("amount must be a positive integer (minor units)")
    return (Decimal(value) / 100).quantize(Decimal("0.01"))


def as_object(op: GatewayOperation) -> dict:
    """A charge or refund as the API shows it."""
    charge = op.kind == GatewayOperation.Kind.CHARGE
    shown = {
        "id": operation_id(op),
        "object": op.kind,
        "amount": to_minor(op.amount),
        "currency": op.currency.lower(),
        "status": "succeeded" if op.outcome == GatewayOperation.Outcome.SUCCEEDED else "failed",
        "failure_code": op.decline_code or None,
        "idempotency_key": op.idempotency_key,
        "metadata": {"order_id": op.order_id},
        "created": op.created_at.timestamp(),
    }
    if not charge:
        shown["charge_key"] = op.refunded_charge_key
    return shown


def error(status: int, kind: str, code: str, message: str, **extra) -> tuple[int, dict]:
    return status, {"error": {"type": kind, "code": code, "message": message, **extra}}


def latency() -> float:
    """Seconds this answer takes: lognormal around FAKE_GATEWAY_LATENCY ms."""
    median = setting("FAKE_GATEWAY_LATENCY") / 1000
    return median * math.exp(random.gauss(0, LATENCY_SIGMA)) if median > 0 else 0.0


def create_charge(key: str, body: dict) -> tuple[int, dict]:
    amount = from_minor(body.get("amount"))
    currency = str(body.get("currency") or "").upper()
    token = str(body.get("source") or "")
    order_id = str((body.get("metadata") or {}).get("order_id") or "")
    if len(currency) != 3 or not order_id:
        raise ValueError("currency (3 letters) and metadata.order_id are required")
    try:
        op, made_now = fake_ledger.record_charge(
            idempotency_key=key, order_id=order_id, amount=amount, currency=currency, token=token
        )
    except Unavailable as exc:
        return error(503, "api_error", "unavailable", str(exc))
    if made_now and token == "tok_timeout":
        raise Unanswered("drop")
    if made_now and token == "tok_hang":
        raise Unanswered("hang")
    if op.outcome != GatewayOperation.Outcome.SUCCEEDED:
        return error(402, "card_error", op.decline_code, "the card was declined", charge=as_object(op))
    if made_now and token == "tok_slow":
        raise Delayed(200, as_object(op), slow_delay())
    return 200, as_object(op)


def create_refund(key: str, body: dict) -> tuple[int, dict]:
    amount = from_minor(body.get("amount"))
    charge_id = str(body.get("charge") or "")
    try:
        op = fake_ledger.record_refund(idempotency_key=key, charge_id=charge_id, amount=amount)
    except NotRefundable as exc:
        return error(400, "invalid_request_error", "charge_not_refundable", str(exc))
    return 200, as_object(op)


def look_up(key: str) -> tuple[int, dict]:
    op = fake_ledger.look_up(key)
    if op is None:
        return error(404, "invalid_request_error", "resource_missing", f"no operation under {key}")
    return 200, as_object(op)


def ledger(order_id: str | None) -> tuple[int, dict]:
    return 200, {"object": "list", "data": [as_object(op) for op in fake_ledger.money_moved(order_id=order_id)]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the caller's pool reuses its connections
    # Headers and body leave in two writes: with Nagle on, the body waited for the caller's delayed
    # ACK, 40 ms on every answer (measured: the saga drained 17 orders/s with the gateway at 0 ms).
    disable_nagle_algorithm = True
    server_version = "FakeGateway/1"

    def log_message(self, format, *args):  # noqa: A002 - the signature is http.server's
        logger.debug("%s %s", self.address_string(), format % args)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/healthz":
            return self.answer(200, {"status": "ok"})
        if url.path.startswith("/v1/operations/"):
            return self.serve(lambda: look_up(urllib.parse.unquote(url.path.removeprefix("/v1/operations/"))))
        if url.path == "/v1/ledger":
            order_id = urllib.parse.parse_qs(url.query).get("order_id", [None])[0]
            return self.serve(lambda: ledger(order_id))
        return self.answer(*error(404, "invalid_request_error", "not_found", f"no route {url.path}"))

    def do_POST(self):
        path = urllib.parse.urlsplit(self.path).path
        operation = {"/v1/charges": create_charge, "/v1/refunds": create_refund}.get(path)
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            return self.answer(*error(400, "invalid_request_error", "parse_error", "the body is not JSON"))
        if operation is None:
            return self.answer(*error(404, "invalid_request_error", "not_found", f"no route {path}"))
        key = self.headers.get("Idempotency-Key") or ""
        if not key or len(key) > 255:
            return self.answer(*error(400, "invalid_request_error", "idempotency_key_missing", "Idempotency-Key"))
        self.serve(lambda: operation(key, body if isinstance(body, dict) else {}))

    def serve(self, operation) -> None:
        delay = latency()
        try:
            status, body = storage.submit(self.run, operation).result()
            if random.random() < setting("FAKE_GATEWAY_TIMEOUT_RATE"):
                raise Unanswered("hang")
        except Delayed as delayed:
            status, body, delay = delayed.status, delayed.body, delay + delayed.seconds
        except Unanswered as unanswered:
            if unanswered.how == "hang":
                self.hold()
            self.close_connection = True
            return
        except KeyReused as exc:
            status, body = error(400, "idempotency_error", "idempotency_key_reused", str(exc))
        except (ValueError, TypeError) as exc:
            status, body = error(400, "invalid_request_error", "parameter_invalid", str(exc))
        except DatabaseError as exc:  # the outcome is unknown to the caller: a 500, as a real API's
            logger.exception("the gateway's storage failed")
            status, body = error(500, "api_error", "storage", str(exc))
        time.sleep(delay)
        self.answer(status, body)

    @staticmethod
    def run(operation) -> tuple[int, dict]:
        """``operation``, once more on fresh connections if the first found its connection dead (a
        terminated backend, a restarted server): every operation is keyed, so a second try repeats nothing."""
        try:
            return operation()
        except (OperationalError, InterfaceError):
            logger.warning("the gateway's database connection was lost: trying again on a new one")
            connections.close_all()
            return operation()

    def hold(self) -> None:
        """Never answer: wait until the caller closes its socket (it timed out), at most HANG_LIMIT."""
        deadline = time.monotonic() + HANG_LIMIT
        while time.monotonic() < deadline:
            readable, _, _ = select.select([self.connection], [], [], 1.0)
            if readable and not self.connection.recv(1, socket.MSG_PEEK):  # an empty peek: the caller is gone
                return

    def answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status, HTTPStatus(status).phrase)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class GatewayServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    allow_reuse_address = True


def serve(host: str, port: int, stop: threading.Event) -> None:
    """Serve until ``stop`` is set."""
    server = GatewayServer((host, port), Handler)
    threading.Thread(target=lambda: (stop.wait(), server.shutdown()), daemon=True).start()
    logger.info(
        "fake gateway listening on http://%s:%s, answers after a median %g ms (FAKE_GATEWAY_LATENCY), "
        "a share %g never answered (FAKE_GATEWAY_TIMEOUT_RATE)",
        host,
        port,
        setting("FAKE_GATEWAY_LATENCY"),
        setting("FAKE_GATEWAY_TIMEOUT_RATE"),
    )
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
