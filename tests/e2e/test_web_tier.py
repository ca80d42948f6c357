"""``make serve``'s web tier: nginx in front of gunicorn, DEBUG off, as scripts/serve.py runs it.

Hostile requests over raw sockets: every error nginx (or gunicorn behind it) answers itself is
the API's JSON error shape with the security headers, and writes nothing. A chunked checkout is
placed; bodies over the limit are refused before a worker sees them; 16 clients that send their
body a byte at a time hold no gunicorn worker while ``/healthz`` answers and a checkout is
placed, and nginx cuts them at its timeout (2 s here). With gunicorn gone, nginx answers 502 in
JSON and scripts/serve.py stops; Ctrl-C on ``make serve`` stops both children, and make says
nothing. The checkout throttle keys on the address nginx saw. And every row of issue 16's table
answers as it should through the tier (what Django answers: the Host, surrogates, depth, SKUs,
``/metrics``, CSP, ``Cache-Control``).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings

from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import (
    BASE_DIR,
    ProcessGroup,
    alive,
    child_pids,
    database_url,
    descendants,
    free_port,
    wait_until,
)
from faultlib.raw_http import chunked
from faultlib.serve import (
    access_status,
    request,
    start_tier,
    stop_tier,
    var_dir,
)
from orders.models import CheckoutRequest, Order, StorefrontProduct
from service_platform.gunicorn_errors import HEADERS as ERROR_HEADERS

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

LIMIT = settings.API_MAX_BODY_BYTES
CLIENT_TIMEOUT = 2  # nginx's client timeouts in these tests (10 s in make serve)
HOST = b"Host: 127.0.0.1\r\n"
METRICS_TOKEN = "web-tier-metrics"


def tier_env() -> dict[str, str]:
    url = database_url()
    return {
        **os.environ,
        "DATABASE_URL": url,
        "GATEWAY_DATABASE_URL": url,
        "PYTHONUNBUFFERED": "1",
        "CLIENT_TIMEOUT": str(CLIENT_TIMEOUT),
        "MESSAGING_ENCRYPTION_KEYS": settings.DEVELOPMENT_ENCRYPTION_KEYS,
    }


@pytest.fixture(scope="module")
def root():
    """The tiers' VAR_DIRs: sockets, nginx's configuration, temporary files and logs."""
    folder = var_dir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def group(django_db_setup, tmp_path_factory, root):
    processes = ProcessGroup(tmp_path_factory.mktemp("web-tier"), tier_env())
    yield processes
    processes.stop_all()
    print(processes.logs())


@pytest.fixture(scope="module")
def tier(group, root):
    """One web tier for the module's requests (each test's database is flushed behind it)."""
    running = start_tier(group, root, {"METRICS_TOKEN": METRICS_TOKEN})
    yield running
    stop_tier(running)


@pytest.fixture
def widget():
    return StorefrontProduct.objects.create(
        sku="WIDGET", name="Widget", price=Decimal("19.99"), available=100, version=1
    )


def checkout_json(token: str = "tok_visa") -> bytes:
    return json.dumps(
        {"customer_id": "web-tier", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": token}
    ).encode()


def checkout_head(extra: bytes = b"") -> bytes:
    key = str(uuid.uuid4()).encode()
    return (
        b"POST /api/checkout/ HTTP/1.1\r\n"
        + HOST
        + b"Content-Type: application/json\r\nIdempotency-Key: "
        + key
        + b"\r\n"
        + extra
    )


def assert_json_error(reply, status: int, code: str) -> None:
    assert reply.status == status, (reply.status, reply.headers, reply.body[:300])
    assert reply.headers["content-type"] == "application/json", reply.headers
    body = json.loads(reply.body)
    assert body["code"] == code and isinstance(body["detail"], str) and body["detail"], body
    assert set(body) == {"code", "detail"}
    for name, value in ERROR_HEADERS.items():
        assert reply.headers.get(name.lower()) == value, (name, reply.headers)


def get_with(header: bytes = b"", target: bytes = b"/api/products/") -> bytes:
    return b"GET " + target + b" HTTP/1.1\r\n" + HOST + header + b"\r\n"


def post_with(headers: bytes, body: bytes = b"") -> bytes:
    return checkout_head(headers + b"\r\n") + body


OVER = b" " * (LIMIT + 1)
HOSTILE = {
    # Control characters in a header: in the value (nginx passes it on, gunicorn refuses it in
    # JSON), NUL in the value and any in the name (nginx refuses them itself).
    "control character in a header value": (get_with(b"X-Note: a\x01b\r\n"), 400, "bad_request"),
    "DEL in a header value": (get_with(b"X-Note: a\x7fb\r\n"), 400, "bad_request"),
    "NUL in a header value": (get_with(b"X-Note: a\x00b\r\n"), 400, "bad_request"),
    "control character in a header name": (get_with(b"X-No\x02te: ab\r\n"), 400, "bad_request"),
    "a 10,000-character header": (get_with(b"X-Note: " + b"a" * 10_000 + b"\r\n"), 431, "headers_too_large"),
    "150 header lines (gunicorn takes 100)": (
        get_with(b"".join(b"X-Note-%d: a\r\n" % n for n in range(150))),
        431,
        "headers_too_large",
    ),
    "a 4 KB URL": (get_with(target=b"/api/products/?q=" + b"a" * 4096), 414, "uri_too_long"),
    "bytes beyond ASCII in the URL": (get_with(target=b"/api/products/\xc3\xa9"), 400, "bad_request"),
    "a Content-Length that is not a number": (post_with(b"Content-Length: 12abc\r\n", b"{}"), 400, "bad_request"),
    "two Content-Lengths": (post_with(b"Content-Length: 2\r\nContent-Length: 3\r\n", b"{}"), 400, "bad_request"),
    "Content-Length with chunked": (
        post_with(b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", chunked(b"{}")),
        400,
        "bad_request",
    ),
    "an unknown transfer coding": (post_with(b"Transfer-Encoding: gzip\r\n"), 501, "not_implemented"),
    "a body over the limit with Content-Length": (
        post_with(b"Content-Length: %d\r\n" % len(OVER), OVER),
        413,
        "payload_too_large",
    ),
    "a chunked body over the limit": (
        post_with(b"Transfer-Encoding: chunked\r\n", chunked(OVER, 16384)),
        413,
        "payload_too_large",
    ),
    "a request line that is not HTTP": (b"HELLO\r\n\r\n", 400, "bad_request"),
    "nginx's own error pages, asked for directly": (get_with(target=b"/_error/502"), 404, "not_found"),
    # nginx refuses TRACE itself, whatever the path (issue 26, row 8).
    "TRACE": (b"TRACE /api/products/ HTTP/1.1\r\n" + HOST + b"\r\n", 405, "method_not_allowed"),
    "TRACE on the admin": (b"TRACE /admin/login/ HTTP/1.1\r\n" + HOST + b"\r\n", 405, "method_not_allowed"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_every_error_the_front_answers_is_the_json_shape_with_the_security_headers(tier, widget, case):
    raw, status, code = HOSTILE[case]

    reply = request(tier.port, raw)

    assert_json_error(reply, status, code)
    assert not Order.objects.exists() and not CheckoutRequest.objects.exists()


def test_an_http_0_9_request_gets_the_json_error_body_alone(tier):
    with socket.create_connection(("127.0.0.1", tier.port), timeout=10) as sock:
        sock.sendall(b"GET /api/products/\r\n")  # HTTP/0.9: no version, no headers; its answer has none
        answer = b"".join(iter(lambda: sock.recv(65536), b""))

    assert json.loads(answer) == {"code": "bad_request", "detail": "The request is malformed."}


def test_a_chunked_checkout_is_placed_and_a_body_at_the_limit_still_reaches_django(tier, widget):
    placed = request(tier.port, post_with(b"Transfer-Encoding: chunked\r\n", chunked(checkout_json(), 7)))
    # Exactly the limit passes nginx; Django reads it whole and says what is wrong with it.
    at_limit = request(tier.port, post_with(b"Content-Length: %d\r\n" % LIMIT, b" " * LIMIT))

    assert placed.status == 201, placed.body
    order = Order.objects.get(pk=json.loads(placed.body)["id"])
    assert (order.status, order.customer_id, order.total) == ("PENDING", "web-tier", Decimal("19.99"))
    assert placed.headers["content-type"] == "application/json"
    assert at_limit.status == 400 and json.loads(at_limit.body)["code"] == "parse_error", at_limit.body
    assert Order.objects.count() == 1


def test_slow_clients_hold_no_worker_and_are_cut_at_nginxs_timeout(tier, widget):
    """16 clients declare a body and send it a byte at a time; gunicorn has 2 sync workers."""
    slow = []
    for _ in range(16):
        sock = socket.create_connection(("127.0.0.1", tier.port), timeout=30)
        sock.sendall(post_with(b"Content-Length: 1000\r\n"))
        slow.append(sock)
    stop_sending = threading.Event()
    bytes_sent = [0]  # by each slow client

    def trickle():  # a byte each 0.5 s: inside nginx's 2 s timeout, so they stay while this runs
        while True:
            for sock in slow:
                sock.sendall(b" ")
            bytes_sent[0] += 1
            if stop_sending.wait(0.5):
                return

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        wait_until(lambda: bytes_sent[0] >= 2, timeout=10, message="each slow client to send 2 bytes of its body")
        started = time.monotonic()
        health = request(tier.port, get_with(target=b"/healthz"), timeout=5)
        health_seconds = time.monotonic() - started
        placed = request(tier.port, post_with(b"Content-Length: %d\r\n" % len(checkout_json()), checkout_json()))
        placed_while_hanging = sender.is_alive()
    finally:
        stop_sending.set()
        sender.join(5)

    # A worker held by a slow client would leave it unanswered past its 5 s; a busy machine takes a second or two.
    assert health.status == 200 and health_seconds < 4.0, (health.status, health_seconds)
    assert placed.status == 201, placed.body
    assert placed_while_hanging
    assert Order.objects.get(pk=json.loads(placed.body)["id"]).status == "PENDING"
    # Now silent: nginx closes each within its timeout (plus a margin), without an answer.
    silent_since = time.monotonic()
    for sock in slow:
        sock.settimeout(CLIENT_TIMEOUT + 5)
        try:
            leftover = sock.recv(1000)
        except ConnectionResetError:
            leftover = b""
        sock.close()
        assert leftover == b""
    assert time.monotonic() - silent_since < CLIENT_TIMEOUT + 5
    assert Order.objects.count() == 1  # none of the slow ones reached Django
    wait_until(
        lambda: sum(access_status(line) == 408 for line in tier.access_log()) >= 16,
        timeout=5,
        message="nginx to log the 16 cut clients as 408",
    )


def test_with_gunicorn_gone_nginx_answers_a_json_502_and_serve_stops(group, root):
    tier = start_tier(group, root)
    children = tier.children()
    gunicorn_workers = child_pids(children["gunicorn"])
    os.kill(tier.proc.pid, signal.SIGSTOP)  # so that it cannot stop nginx before the request
    try:
        for pid in [children["gunicorn"], *gunicorn_workers]:
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not any(alive(pid) for pid in gunicorn_workers), timeout=10, message="gunicorn gone")

        reply = request(tier.port, get_with())
    finally:
        os.kill(tier.proc.pid, signal.SIGCONT)

    assert_json_error(reply, 502, "unavailable")
    assert reply.headers["retry-after"] == "5"
    assert tier.proc.wait(timeout=30) == 1
    assert not alive(children["nginx"])


def test_the_checkout_throttle_keys_on_the_address_nginx_saw_not_on_x_forwarded_for(group, root, widget):
    # One worker: the throttle's counters live in its memory (locmem cache).
    tier = start_tier(group, root, {"CHECKOUT_THROTTLE": "2/min", "WEB_CONCURRENCY": "1"})

    def checkout(source: str, forwarded_for: str | None = None) -> int:
        header = f"X-Forwarded-For: {forwarded_for}\r\n".encode() if forwarded_for else b""
        return request(
            tier.port,
            post_with(header + b"Content-Length: %d\r\n" % len(checkout_json()), checkout_json()),
            source=source,
        ).status

    first = [checkout("127.0.0.1"), checkout("127.0.0.1", "198.51.100.7")]
    # A fresh address in its own X-Forwarded-For: nginx appends the real one, the throttle reads that.
    spoofed = [checkout("127.0.0.1", f"203.0.113.{n}") for n in range(3)]
    other_client = checkout("127.0.0.2", "127.0.0.1")

    assert first == [201, 201]
    assert spoofed == [429, 429, 429]
    assert other_client == 201
    assert Order.objects.count() == 3
    assert stop_tier(tier) == 0


def test_ctrl_c_on_make_serve_stops_nginx_and_gunicorn_and_make_prints_no_error(tmp_path, root):
    port = free_port()
    log = tmp_path / "make-serve.log"
    env = {**tier_env(), "SECRET_KEY": "s" * 50, "ALLOWED_HOSTS": "127.0.0.1", "VAR_DIR": str(var_dir(root))}
    with log.open("wb") as out:
        # STAMP= : the suite already runs in the installed virtualenv, nothing to install.
        make = subprocess.Popen(
            ["make", "serve", "STAMP=", f"PORT={port}", "SERVE_HOST=127.0.0.1"],
            cwd=BASE_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: make.poll() is not None or request(port, get_with(target=b"/healthz")).status == 200,
            timeout=90,
            interval=0.3,
            message="make serve to answer",
        )
        below = descendants(make.pid)
        programs = sorted(Path(os.readlink(f"/proc/{pid}/exe")).name.rstrip("0123456789.") for pid in below)
        # serve.py, gunicorn's master and 2 workers; nginx's master and a worker per core
        assert programs == ["nginx"] * (1 + os.cpu_count()) + ["python"] * 4, programs

        os.killpg(make.pid, signal.SIGINT)  # what the terminal does on Ctrl-C: the foreground group
        make.wait(timeout=60)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
    output = log.read_text()
    print(output)
    assert make.returncode in (0, -signal.SIGINT)  # make re-raises the SIGINT it got, after a clean stop
    assert "make: ***" not in output and "Traceback" not in output
    wait_until(lambda: not any(alive(pid) for pid in below), timeout=10, message="no nginx or gunicorn left")


def test_without_secret_key_or_allowed_hosts_serve_refuses_in_one_line():
    env = {key: value for key, value in tier_env().items() if key not in ("SECRET_KEY", "ALLOWED_HOSTS")}
    for missing, empty in (
        ("SECRET_KEY", False),
        ("ALLOWED_HOSTS", False),
        ("SECRET_KEY", True),
        ("ALLOWED_HOSTS", True),
    ):
        given = {"SECRET_KEY": "s" * 50, "ALLOWED_HOSTS": "shop.example.com"}
        if empty:
            given[missing] = ""
        else:
            given.pop(missing)
        done = subprocess.run(
            [sys.executable, "scripts/serve.py", "--port", "1"],
            cwd=BASE_DIR,
            env={**env, **given, "DEBUG": "1"},  # make serve turns DEBUG off whatever it was
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2
        assert done.stdout == ""
        assert done.stderr.splitlines() == [
            f"make serve: {missing} not set: make serve runs with DEBUG off, which needs both, "
            "e.g. SECRET_KEY=<50 random characters> ALLOWED_HOSTS=shop.example.com"
        ]


@pytest.mark.skipif(os.geteuid() != 0, reason="nginx's workers drop to www-data only under a root master")
def test_as_root_a_var_dir_nginxs_workers_cannot_enter_is_refused_in_one_line(tmp_path):
    private = tmp_path / "home"
    private.mkdir(mode=0o700)

    done = subprocess.run(
        [sys.executable, "scripts/serve.py", "--port", "1"],
        cwd=BASE_DIR,
        env={**tier_env(), "SECRET_KEY": "s" * 50, "ALLOWED_HOSTS": "a", "VAR_DIR": str(private / "var")},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith(f"make serve: nginx's workers (www-data) cannot enter {private}/var/serve: ")
    assert not (private / "var" / "serve" / "nginx.conf").exists()


# --- issue 16's table through make serve: what Django answers (service_platform/errors.py, the middleware) ---
NO_STORE = "max-age=0, no-cache, no-store, must-revalidate, private"
DJANGO_SECURITY_HEADERS = {
    name: ERROR_HEADERS[name]
    for name in ("X-Content-Type-Options", "X-Frame-Options", "Referrer-Policy", "Cross-Origin-Opener-Policy")
}


def assert_django_json(reply, status: int, code: str) -> dict:
    assert reply.status == status, (reply.status, reply.body[:300])
    assert reply.headers["content-type"] == "application/json", reply.headers
    for name, value in DJANGO_SECURITY_HEADERS.items():
        assert reply.headers.get(name.lower()) == value, (name, reply.headers)
    body = json.loads(reply.body)
    assert body["code"] == code and body["detail"], body
    return body


def post_text(port: int, text: str):
    body = text.encode()
    return request(port, post_with(b"Content-Length: %d\r\n" % len(body), body))


def test_every_row_of_the_issues_table_answers_as_expected_through_make_serve(tier, widget):
    valid = checkout_json().decode()
    evil_host = request(tier.port, b"GET /api/products/ HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    surrogate_name = post_text(tier.port, valid[:-1] + ', "\\ud800": 1}')
    deep = post_text(tier.port, "[" * 950 + "]" * 950)
    padded_sku = post_text(tier.port, valid.replace('"WIDGET"', '" WIDGET"'))
    newline_sku = post_text(tier.port, valid.replace('"WIDGET"', '"WIDGET\\n"'))
    unknown_path = request(tier.port, get_with(target=b"/api/nope"))
    metrics_post = request(tier.port, b"POST /metrics HTTP/1.1\r\n" + HOST + b"Content-Length: 0\r\n\r\n")
    metrics_bearer = request(
        tier.port, get_with(b"Authorization: bearer " + METRICS_TOKEN.encode() + b"\r\n", b"/metrics")
    )
    admin_login = request(tier.port, get_with(target=b"/admin/login/"))
    api_docs = request(tier.port, get_with(target=b"/api/docs/"))
    placed = post_text(tier.port, valid)
    order = request(tier.port, get_with(target=b"/api/orders/%s/" % json.loads(placed.body)["id"].encode()))

    assert_django_json(evil_host, 400, "disallowed_host")
    assert assert_django_json(surrogate_name, 400, "invalid")["errors"] == {"\ud800": ["Unknown field."]}
    surrogate_name.body.decode("ascii")  # escaped, so always encodable
    assert_django_json(deep, 400, "parse_error")
    for reply, sku in ((padded_sku, " WIDGET"), (newline_sku, "WIDGET\n")):
        assert assert_django_json(reply, 400, "invalid")["errors"] == {"items": [f"unknown sku: {sku}"]}
    assert_django_json(unknown_path, 404, "not_found")
    assert_django_json(metrics_post, 405, "method_not_allowed")
    assert metrics_bearer.status == 200 and b"messaging_outbox_pending " in metrics_bearer.body
    for page in (admin_login, api_docs):
        assert page.status == 200 and page.headers["content-type"].startswith("text/html")
        policy = set(page.headers["content-security-policy"].split("; "))
        assert {"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'"} <= policy, policy
    assert (placed.status, order.status) == (201, 200)
    assert placed.headers["cache-control"] == order.headers["cache-control"] == NO_STORE
    assert Order.objects.count() == 1  # only the valid checkout wrote anything


def post_as(content_type: bytes, body: bytes) -> bytes:
    key = str(uuid.uuid4()).encode()
    head = b"POST /api/checkout/ HTTP/1.1\r\n" + HOST + b"Content-Type: " + content_type + b"\r\n"
    return head + b"Idempotency-Key: " + key + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body


def test_issue_26s_rows_answer_as_expected_through_make_serve(tier, widget):
    valid = checkout_json()
    trace = request(tier.port, b"TRACE /api/orders/ HTTP/1.1\r\n" + HOST + b"Max-Forwards: 0\r\n\r\n")
    deep = {
        charset: request(tier.port, post_as(b"application/json; charset=" + charset, b"[" * 5000))
        for charset in (b"cp500", b"utf-7", b"cp1026")
    }
    twice = valid.replace(b'"quantity": 1', b'"quantity": 1, "quantity": 7')
    duplicated = request(tier.port, post_as(b"application/json", twice))

    assert (trace.status, json.loads(trace.body)) == (
        405,
        {"code": "method_not_allowed", "detail": "Method TRACE is not allowed."},
    )
    assert trace.headers["allow"] == "GET, HEAD, POST, OPTIONS"
    assert_json_error(trace, 405, "method_not_allowed")
    for reply in deep.values():
        assert assert_django_json(reply, 400, "parse_error")["errors"] == {
            "body": ["JSON parse error - nested deeper than 32 levels."]
        }
    assert assert_django_json(duplicated, 400, "parse_error")["errors"] == {
        "items.0.quantity": ["Duplicate key: send each key of an object once."]
    }
    assert not Order.objects.exists() and not CheckoutRequest.objects.exists()
