"""scripts/announce_ready.py: `make run` says it is up only once the API lists the catalogue."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from faultlib.processes import free_port
from scripts.announce_ready import look


@pytest.fixture
def server():
    """A web process whose answers the test sets: path -> (status, JSON body)."""
    answers: dict[str, tuple[int, object]] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            status, body = answers.get(self.path, (404, {"code": "not_found"}))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", answers
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_not_up_while_the_catalogue_is_empty_then_up_once_it_is_listed(server):
    base, answers = server
    answers["/readyz"] = (503, {"database": "ok", "broker": "down"})
    assert look(base) == ("/readyz to answer 200 (the database and the broker)", "")

    answers["/readyz"] = (200, {"database": "ok", "broker": "ok"})
    answers["/api/products/"] = (200, [])
    assert look(base) == (
        "/api/products/ to list the catalogue (its events pass through the relay and the consumers)",
        "",
    )

    answers["/api/products/"] = (200, [{"sku": "WIDGET", "name": "Widget", "price": "19.99", "available": 5}])
    assert look(base) == (None, f"make run: up: {base}/api/products/ lists the catalogue; checkouts are accepted")


def test_a_deployment_without_the_api_is_up_once_ready(server):
    base, answers = server
    answers["/readyz"] = (200, {"database": "ok", "broker": "ok"})
    assert look(base) == (None, f"make run: up: {base}/readyz answers 200")


def test_nothing_listening_is_not_up():
    assert look(f"http://127.0.0.1:{free_port()}") == ("/readyz to answer 200 (the database and the broker)", "")


def test_not_up_until_the_fake_gateway_answers_too(server):
    base, answers = server
    answers["/readyz"] = (200, {"database": "ok", "broker": "ok"})
    answers["/api/products/"] = (200, [{"sku": "WIDGET", "name": "Widget", "price": "19.99", "available": 5}])
    gateway = f"http://127.0.0.1:{free_port()}/healthz"  # nothing listens there yet
    assert look(base, also=(gateway,)) == (f"{gateway} to answer 200", "")

    answers["/healthz"] = (200, {"status": "ok"})
    assert look(base, also=(f"{base}/healthz",)) == (
        None,
        f"make run: up: {base}/api/products/ lists the catalogue; checkouts are accepted",
    )
