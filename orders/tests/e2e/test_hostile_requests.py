"""What a hostile or careless client sends, answered in the JSON error shape with the same
status from ``make run``'s server (``DEBUG`` on) and gunicorn (``DEBUG`` off), and nothing
written: a field name that is a lone surrogate, JSON nested 950 levels deep, SKUs and
customer ids with stray whitespace, a disallowed ``Host``, ``POST /metrics``, a chunked body.
Plus the headers every answer carries. Exact bytes go out over raw sockets where a client
library would change them (``faultlib/raw_http.py``)."""

import json
import uuid
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation

from faultlib.fixtures import ALL_DATABASES
from faultlib.raw_http import chunked, raw_request, request_bytes
from faultlib.web import MODES, call, checkout_body, get, post_checkout, start_web
from orders.models import CheckoutRequest, Order, StorefrontProduct
from service_platform import errors

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

METRICS_TOKEN = "metrics-secret"
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}
CSP = {
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self'",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
}
NO_STORE = "max-age=0, no-cache, no-store, must-revalidate, private"


@pytest.fixture(params=MODES)
def web(request, processes) -> str:
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("19.99"), available=10, version=1)
    return start_web(processes, request.param, env={"METRICS_TOKEN": METRICS_TOKEN})


def assert_error(reply, status: int, code: str) -> dict:
    assert reply.status == status, reply.body[:500]
    assert reply.headers["Content-Type"] == "application/json", reply.headers
    body = reply.json()
    assert body["code"] == code and isinstance(body["detail"], str) and body["detail"], body
    return body


def assert_security_headers(reply) -> None:
    assert {name: reply.headers.get(name) for name in SECURITY_HEADERS} == SECURITY_HEADERS, reply.headers


def nothing_written() -> bool:
    return not Order.objects.exists() and not CheckoutRequest.objects.exists()


def post_raw_json(web: str, text: str):
    return call(web, "POST", "/api/checkout/", raw=text.encode(), headers={"Idempotency-Key": str(uuid.uuid4())})


def test_hostile_bodies_are_400_in_json_and_nothing_is_written(web):
    valid = json.dumps(checkout_body())
    surrogate_name = post_raw_json(web, valid[:-1] + ', "\\ud800": 1}')
    deep = post_raw_json(web, "[" * 950 + "]" * 950)
    deep_inside = post_raw_json(web, valid[:-1] + ', "pad": ' + "[" * 40 + "]" * 40 + "}")
    padded_skus = [post_checkout(web, checkout_body(sku=sku)) for sku in (" WIDGET", "WIDGET\n", "WIDGET ")]
    padded_customer = post_checkout(web, {**checkout_body(), "customer_id": " alice"})
    blank_customer = post_checkout(web, {**checkout_body(), "customer_id": "   "})

    body = assert_error(surrogate_name, 400, "invalid")
    assert body["errors"] == {"\ud800": ["Unknown field."]}
    assert b'"\\ud800"' in surrogate_name.body  # escaped in the body, which is plain ASCII
    surrogate_name.body.decode("ascii")
    for reply in (deep, deep_inside):
        assert assert_error(reply, 400, "parse_error")["errors"] == {
            "body": ["JSON parse error - nested deeper than 32 levels."]
        }
    for reply, sku in zip(padded_skus, (" WIDGET", "WIDGET\n", "WIDGET "), strict=True):
        assert assert_error(reply, 400, "invalid")["errors"] == {"items": [f"unknown sku: {sku}"]}
    for reply in (padded_customer, blank_customer):
        assert assert_error(reply, 400, "invalid")["errors"] == {
            "customer_id": ["Must not begin or end with whitespace."]
        }
    assert nothing_written()

    key = str(uuid.uuid4())
    placed, replayed = (post_checkout(web, {**checkout_body(), "customer_id": "a b"}, key=key) for _ in range(2))
    assert (placed.status, replayed.status, replayed.headers["Idempotent-Replayed"]) == (201, 201, "true")
    assert placed.json()["customer_id"] == "a b"
    order_id = placed.json()["id"]
    for reply in (
        placed,
        replayed,
        get(web, f"/api/orders/{order_id}/"),
        call(web, "POST", f"/api/orders/{order_id}/cancel/"),
    ):
        assert reply.status in (200, 201, 202)
        assert reply.headers["Cache-Control"] == NO_STORE
        assert_security_headers(reply)
    assert Order.objects.get().status == Order.Status.CANCELLED


def test_a_disallowed_host_is_a_json_400_with_the_usual_headers(web, request):
    paths = ["/api/products/", "/api/nope", "/healthz", "/metrics", "/"]
    if request.node.callspec.params["web"] == "gunicorn-production":  # runserver serves static files itself
        paths.append("/static/admin/css/base.css")
    for path in paths:
        reply = raw_request(web, request_bytes("GET", path, {"Host": "evil.example"}))

        body = assert_error(reply, 400, "disallowed_host")
        assert body["detail"] == "The Host header names no site this server serves.", path
        assert b"evil.example" not in reply.body
        assert_security_headers(reply)


def test_the_admin_keeps_html_error_pages_and_every_page_has_a_csp(web):
    bad_host = raw_request(web, request_bytes("GET", "/admin/login/", {"Host": "evil.example"}))
    login = get(web, "/admin/login/")
    docs = get(web, "/api/docs/")
    init_script = get(web, "/api/docs/?script=")
    not_found = get(web, "/api/nope")

    assert bad_host.status == 400 and bad_host.headers["Content-Type"].startswith("text/html")
    for page in (login, docs):
        assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
        assert_security_headers(page)
        assert set(page.headers["Content-Security-Policy"].split("; ")) == CSP
    assert b"<script>" not in docs.body and b'src="/api/docs/?script="' in docs.body
    assert (init_script.status, init_script.headers["Content-Type"]) == (200, "application/javascript")
    assert_error(not_found, 404, "not_found")
    assert_security_headers(not_found)


def test_metrics_refuses_other_methods_and_takes_the_bearer_scheme_in_any_case(web):
    for method in ("POST", "PUT", "DELETE"):
        reply = call(web, method, "/metrics", {})
        assert assert_error(reply, 405, "method_not_allowed")["detail"] == f"Method {method} is not allowed here."
        assert reply.headers["Allow"] == "GET, HEAD"
    for scheme in ("Bearer", "bearer", "BEARER"):
        reply = get(web, "/metrics", headers={"Authorization": f"{scheme} {METRICS_TOKEN}"})
        assert reply.status == 200 and b"messaging_outbox_pending " in reply.body
    head = call(web, "HEAD", "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert (head.status, head.body) == (200, b"")
    for authorization in ("bearer wrong", f"Basic {METRICS_TOKEN}", METRICS_TOKEN, ""):
        reply = get(web, "/metrics", headers={"Authorization": authorization})
        assert (reply.status, reply.headers["WWW-Authenticate"]) == (401, "Bearer")


def test_a_chunked_checkout_is_placed_where_the_server_decodes_it_else_refused_with_411(web, request):
    body = json.dumps(checkout_body()).encode()
    headers = {"Host": "127.0.0.1", "Content-Type": "application/json", "Transfer-Encoding": "chunked"}

    def send(payload: bytes):
        request_headers = {**headers, "Idempotency-Key": str(uuid.uuid4())}
        return raw_request(web, request_bytes("POST", "/api/checkout/", request_headers, chunked(payload)))

    reply = send(body)
    if request.node.callspec.params["web"] == "gunicorn-production":  # gunicorn decodes chunks
        assert reply.status == 201, reply.body
        assert Order.objects.get(pk=reply.json()["id"]).customer_id == "web-test"
        over = send(body[:-1] + b', "pad": "' + b"x" * (256 * 1024) + b'"}')
        assert_error(over, 413, "payload_too_large")
        assert Order.objects.count() == 1
    else:  # runserver hands Django no chunked body at all
        assert assert_error(reply, 411, "length_required")["detail"] == "Send the body with a Content-Length."
        assert nothing_written()
    assert_security_headers(reply)
    assert post_checkout(web, checkout_body()).status == 201  # the server is fine afterwards


def test_django_error_handlers_answer_json_outside_the_admin(client, admin_client, rf):
    # pytest-django runs the test client with DEBUG off, where Django calls these handlers.
    not_found, admin_not_found = client.get("/nope"), admin_client.get("/admin/nope/")
    surrogate = client.post(
        "/api/checkout/",
        json.dumps(checkout_body(sku="\ud800")),  # json.dumps escapes it: "\ud800" in the body
        content_type="application/json",
        headers={"Idempotency-Key": str(uuid.uuid4())},
    )

    assert (not_found.status_code, not_found.json()) == (404, {"code": "not_found", "detail": "No such page: /nope"})
    assert admin_not_found.status_code == 404 and admin_not_found["Content-Type"].startswith("text/html")
    assert (surrogate.status_code, surrogate.json()["errors"]) == (
        400,
        {"items.0.sku": ["Surrogate characters are not allowed: U+D800."]},
    )
    answers = {
        (RequestDataTooBig(), "/api/checkout/"): (
            413,
            {"code": "payload_too_large", "detail": "The request body is too large."},
        ),
        (SuspiciousOperation(), "/healthz"): (400, {"code": "bad_request", "detail": "The request is malformed."}),
    }
    for (exception, path), (status, body) in answers.items():
        reply = errors.bad_request(rf.post(path), exception)
        assert (reply.status_code, json.loads(reply.content)) == (status, body)
    assert errors.bad_request(rf.post("/admin/login/"), RequestDataTooBig())["Content-Type"].startswith("text/html")
    crashed = errors.server_error(rf.get("/api/products/"))
    assert (crashed.status_code, json.loads(crashed.content)["code"]) == (500, "server_error")
    assert errors.permission_denied(rf.get("/metrics"), PermissionDenied()).status_code == 403


@pytest.mark.parametrize("path", ["/api/docs/", "/api/schema/", "/api/products/"])
def test_too_many_query_fields_are_a_json_400_even_where_the_view_renders_html_or_yaml(client, path):
    reply = client.get(path + "?" + "&".join(f"f{i}=1" for i in range(1001)))  # Django allows 1000

    assert (reply.status_code, reply["Content-Type"]) == (400, "application/json")
    assert reply.json() == {"code": "bad_request", "detail": "The request is malformed."}


def post_bytes(web: str, body: bytes, content_type: str):
    """``body`` as it is, with ``content_type`` as it is: what urllib would leave alone, said exactly."""
    headers = {
        "Host": "127.0.0.1",
        "Content-Type": content_type,
        "Content-Length": str(len(body)),
        "Idempotency-Key": str(uuid.uuid4()),
    }
    return raw_request(web, request_bytes("POST", "/api/checkout/", headers, body))


def test_json_is_read_as_utf_8_whatever_the_charset_and_a_duplicated_key_is_refused(web):
    # Issue 26, rows 7 and 9: 5,000 brackets under a charset other than UTF-8 were a 500;
    # {"quantity": 1, "quantity": 7} was an order of 7.
    deep = {
        charset: post_bytes(web, b"[" * 5000, f"application/json; charset={charset}")
        for charset in ("cp500", "utf-7", "cp1026")
    }
    spelt = {
        "cp500": post_bytes(web, "[".encode("cp500") * 5000, "application/json; charset=cp500"),
        "utf-7": post_bytes(web, b"+AFs-" * 5000, "application/json; charset=utf-7"),
        "latin-1": post_bytes(web, '{"customer_id": "\xe9"}'.encode("latin-1"), "application/json; charset=latin-1"),
    }
    valid = json.dumps(checkout_body())
    twice = valid.replace('"quantity": 1', '"quantity": 1, "quantity": 7')
    duplicated = post_bytes(web, twice.encode(), "application/json")
    top_level = post_bytes(web, (valid[:-1] + ', "customer_id": "mallory"}').encode(), "application/json")

    for reply in deep.values():
        assert assert_error(reply, 400, "parse_error")["errors"] == {
            "body": ["JSON parse error - nested deeper than 32 levels."]
        }
        assert_security_headers(reply)
    expected = {
        "cp500": "JSON parse error - Expecting value: line 1 column 1 (char 0)",
        "utf-7": "JSON parse error - Expecting value: line 1 column 1 (char 0)",
        "latin-1": "JSON parse error - byte 17 is not UTF-8; JSON is UTF-8 (RFC 8259).",
    }
    assert {charset: reply.json()["errors"] for charset, reply in spelt.items()} == {
        charset: {"body": [detail]} for charset, detail in expected.items()
    }
    for reply in spelt.values():
        assert_error(reply, 400, "parse_error")
    assert duplicated.json() == {
        "code": "parse_error",
        "detail": "JSON parse error - duplicate key: items.0.quantity.",
        "errors": {"items.0.quantity": ["Duplicate key: send each key of an object once."]},
    }
    assert top_level.json()["errors"] == {"customer_id": ["Duplicate key: send each key of an object once."]}
    for reply in (duplicated, top_level):
        assert_error(reply, 400, "parse_error")
    assert nothing_written()
    # A body that is UTF-8 is read as such whatever charset it declares (RFC 8259: it has no effect).
    placed = post_bytes(web, valid.encode(), "application/json; charset=cp500")
    assert placed.status == 201, placed.body
    assert Order.objects.get().lines.get().quantity == 1
