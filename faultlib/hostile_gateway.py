"""A card gateway that lies: an HTTP proxy in front of the fake gateway that mangles its answers the
way a broken, compromised or misconfigured real one can.

The order chooses its mangle by its card token: ``tok_visa+<mangle>`` is forwarded as ``tok_visa``,
and the first ``times`` answers of each kind of operation about that order (its charge, look-ups by
its keys, its refund) are mangled; the rest pass through, so the worker can learn the truth by key.
``tok_visa+<mangle>@refund`` (or ``@charge``) mangles only that kind's answers.
``MANGLES`` lists them. A redirect points at ``elsewhere``, a server that records whatever reaches
it: a client that follows one hands the card's token to another host.

Runs in the test's process on 127.0.0.1, on its own threads; ``close()`` stops it.
"""

import gzip
import http.client
import json
import socket
import struct
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN_MARK = "+"


def _with(change):
    """A mangle that edits the honest answer's operation object (the charge in a decline's error)."""

    def mangle(status, body):
        if isinstance(body.get("error"), dict) and isinstance(body["error"].get("charge"), dict):
            change(body["error"]["charge"])
        else:
            change(body)
        return status, {"Content-Type": "application/json"}, json.dumps(body).encode()

    return mangle


def _raw(status: int, content_type: str, data: bytes, **headers):
    return lambda _status, _body: (status, {"Content-Type": content_type, **headers}, data)


def _redirect(status: int):
    return lambda _status, _body: (status, {"Location": "{elsewhere}/v1/charges", "Content-Type": "text/plain"}, b"")


# Each: (honest status, honest JSON body) -> (status, headers, body bytes); or a special action name.
MANGLES = {
    "html": _raw(200, "text/html", b"<html><body>Bad gateway</body></html>"),
    "notjson": _raw(200, "application/json", b"not json"),
    "notjson404": _raw(404, "application/json", b"not json"),
    "list": _raw(200, "application/json", b"[]"),
    "nan": _raw(200, "application/json", b'{"amount": NaN}'),
    "nostatus": _with(lambda op: op.pop("status", None)),
    "nocharge": lambda status, body: (402, {"Content-Type": "application/json"}, b'{"error": {"type": "card_error"}}'),
    "nullamount": _with(lambda op: op.update(amount=None)),
    "pending": _with(lambda op: op.update(status="pending")),
    "failed": _with(lambda op: op.update(status="failed", failure_code="card_declined")),
    "otherkey": _with(lambda op: op.update(idempotency_key="charge-00000000-0000-0000-0000-000000000000")),
    "otheramount": _with(lambda op: op.update(amount=op["amount"] + 1)),
    "othercurrency": _with(lambda op: op.update(currency="eur" if op["currency"] != "eur" else "usd")),
    "otherorder": _with(lambda op: op["metadata"].update(order_id="00000000-0000-0000-0000-000000000000")),
    "longid": _with(lambda op: op.update(id="ch_" + "9" * 200)),
    "redirect301": _redirect(301),
    "redirect302": _redirect(302),
    "redirect307": _redirect(307),
    "redirect308": _redirect(308),
    "gzip": _raw(200, "application/json", b"\x1f\x8b this is no gzip", **{"Content-Encoding": "gzip"}),
    # 10 MB of zeros in 10 KB: a client that inflates it holds the lot.
    "gzipbomb": _raw(200, "application/json", gzip.compress(b"0" * 10_000_000), **{"Content-Encoding": "gzip"}),
    "html500": _raw(500, "text/html", b"<html>Internal error</html>"),
    "throttled": _raw(429, "application/json", b'{"error": {"type": "rate_limit_error"}}', **{"Retry-After": "1"}),
    "reset": "reset",  # the headers and half the body, then a TCP reset
    "drip": "drip",  # an honest answer, a byte every DRIP_SECONDS
    "huge": "huge",  # an answer that keeps coming (up to 1 GB, its length undeclared)
}
DRIP_SECONDS = 0.5


def _send(handler, status: int, headers: dict, data: bytes) -> None:
    handler.send_response(status)
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _serve(handler) -> tuple[ThreadingHTTPServer, str]:
    """A server on a free port of 127.0.0.1, on a thread of its own; and its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    # shutdown() waits for the loop to look: every 0.5 s by default, 1 s of each test that closes a proxy
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class Elsewhere:
    """Another host: records the requests that reach it, answers each with a success."""

    def __init__(self):
        self.requests: list[tuple[str, str, bytes]] = []
        elsewhere = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _record(self):
                length = int(self.headers.get("Content-Length") or 0)
                elsewhere.requests.append((self.command, self.path, self.rfile.read(length)))
                _send(self, 200, {"Content-Type": "application/json"}, b'{"status": "succeeded"}')

            do_GET = do_POST = _record

        self.server, self.url = _serve(Handler)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class HostileGateway:
    """The proxy. ``url`` is what payments' ``GATEWAY_URL`` points at; ``mangled`` counts what it did."""

    def __init__(self, upstream: str, times: int = 1):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.times = times
        self.elsewhere = Elsewhere()
        self.mangles: dict[str, tuple[str, str]] = {}  # order id -> (mangle, only this kind or "")
        self.mangled: dict[tuple[str, str], int] = {}  # (order id, kind) -> answers mangled so far
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                proxy.handle(self, None)

            def do_POST(self):
                proxy.handle(self, self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        self.server, self.url = _serve(Handler)

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.elsewhere.close()

    def _about(self, handler, body: bytes | None) -> tuple[str, str, bytes | None]:
        """(order id, kind) this request is about, and the body to forward (the token unmarked)."""
        path = urllib.parse.unquote(urllib.parse.urlsplit(handler.path).path)
        key = handler.headers.get("Idempotency-Key") or path.removeprefix("/v1/operations/")
        kind, _, order_id = key.partition("-")
        if handler.command == "POST" and path == "/v1/charges" and body:
            sent = json.loads(body)
            token, _, mangle = str(sent.get("source", "")).partition(TOKEN_MARK)
            order_id = str((sent.get("metadata") or {}).get("order_id", ""))
            if mangle:
                with self.lock:
                    self.mangles[order_id] = tuple(mangle.partition("@")[::2])
                sent["source"] = token
                body = json.dumps(sent).encode()
        return order_id, kind, body

    def handle(self, handler, body: bytes | None) -> None:
        order_id, kind, body = self._about(handler, body)
        with self.lock:
            mangle, only = self.mangles.get(order_id, (None, ""))
            done = self.mangled.get((order_id, kind), 0)
            if mangle and only in ("", kind) and done < self.times:
                self.mangled[(order_id, kind)] = done + 1
            else:
                mangle = None
        status, data = self._forward(handler, body)
        if mangle is None:
            return _send(handler, status, {"Content-Type": "application/json"}, data)
        action = MANGLES[mangle]
        if action == "reset":
            return self._reset(handler, status, data)
        if action == "drip":
            return self._drip(handler, status, data)
        if action == "huge":
            return self._huge(handler)
        status, headers, data = action(status, json.loads(data))
        if "Location" in headers:
            headers["Location"] = headers["Location"].format(elsewhere=self.elsewhere.url)
        _send(handler, status, headers, data)

    def _forward(self, handler, body: bytes | None) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() in ("idempotency-key", "content-type")}
            connection.request(handler.command, handler.path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def _reset(self, handler, status: int, data: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data[: len(data) // 2])
        handler.wfile.flush()
        # SO_LINGER 0: close() sends a reset, not a clean end of stream.
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.close_connection = True
        handler.connection.close()

    def _drip(self, handler, status: int, data: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.flush()
        try:
            for byte in data:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(DRIP_SECONDS)
        except OSError:  # the client gave up: as it should
            handler.close_connection = True

    def _huge(self, handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Connection", "close")  # the body ends when the connection does
        handler.end_headers()
        chunk = b"[" + b"0," * 32767
        try:
            for _ in range(1 << 14):  # at most 1 GB, until the client closes
                handler.wfile.write(chunk)
        except OSError:
            pass
        handler.close_connection = True
