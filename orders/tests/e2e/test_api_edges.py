"""The API's edges over real HTTP, with ``DEBUG`` on (``make run``'s server) and off (gunicorn).

Trailing slashes, unknown paths, unknown fields, oversized bodies, and a database that refuses
connections or does not answer: each gets its own status and the JSON error shape, never a
``500`` or an HTML page, in both modes.
"""

import threading
import time
import uuid
from decimal import Decimal

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import InternalError, OperationalError, connection, connections, transaction
from django.test import Client

from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import database_url
from faultlib.tcp_proxy import SilenceableProxy
from faultlib.web import MODES, call, checkout_body, get, post_checkout, start_web
from kernel.exceptions import database_error_body
from orders.models import CheckoutRequest, Order, StorefrontProduct

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

LIMIT = 256 * 1024


@pytest.fixture(params=MODES)
def web(request, processes) -> str:
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("19.99"), available=10, version=1)
    return start_web(processes, request.param)


def assert_error(reply, status: int, code: str) -> dict:
    assert reply.status == status, reply.body[:500]
    assert reply.headers["Content-Type"].startswith("application/json"), reply.headers
    body = reply.json()
    assert body["code"] == code and isinstance(body["detail"], str) and body["detail"]
    return body


def nothing_written() -> bool:
    return not Order.objects.exists() and not CheckoutRequest.objects.exists()


def test_api_paths_answer_the_same_with_or_without_the_trailing_slash(web):
    placed = post_checkout(web, checkout_body(quantity=2), path="/api/checkout")

    assert placed.status == 201, placed.body
    order_id = placed.json()["id"]
    assert Order.objects.get(pk=order_id).total == Decimal("39.98")
    without, with_slash = get(web, f"/api/orders/{order_id}"), get(web, f"/api/orders/{order_id}/")
    assert (without.status, with_slash.status) == (200, 200)
    assert without.json() == with_slash.json()
    assert get(web, "/api/products").json() == get(web, "/api/products/").json() != []
    assert call(web, "POST", f"/api/orders/{order_id}/cancel").status == 202


def test_unknown_api_paths_are_a_json_404(web):  # one server for them all: each start is a second
    for path in ["/api/nope", "/api/nope/", "/api/", "/api", "/api/orders/", "/api/checkout/x/"]:
        for method in ("GET", "POST"):
            body = assert_error(call(web, method, path, {}), 404, "not_found")
            assert path in body["detail"], (method, path)


def test_unknown_body_fields_are_refused_by_name_and_nothing_is_written(web):
    top = post_checkout(web, checkout_body(pad="x" * 1000, coupon="FREE"))
    nested = post_checkout(web, {**checkout_body(), "items": [{"sku": "WIDGET", "quantity": 1, "price": "0.01"}]})
    mixed = post_checkout(web, {"items": [{"sku": "WIDGET", "quantity": 0}], "payment_token": "tok_visa", "x": 1})

    assert assert_error(top, 400, "invalid")["errors"] == {"coupon": ["Unknown field."], "pad": ["Unknown field."]}
    assert assert_error(nested, 400, "invalid")["errors"] == {"items.0.price": ["Unknown field."]}
    assert assert_error(mixed, 400, "invalid")["errors"] == {
        "customer_id": ["This field is required."],
        "items.0.quantity": ["Ensure this value is greater than or equal to 1."],
        "x": ["Unknown field."],
    }
    assert nothing_written()


def test_oversized_bodies_are_413_and_nothing_is_written(web):
    just_under = checkout_body()
    just_under["pad"] = "x" * (LIMIT - len(str(just_under)) - 200)
    over = {**checkout_body(), "pad": "x" * (LIMIT + 1)}
    huge = {**checkout_body(), "pad": "x" * 3_000_000}

    assert assert_error(post_checkout(web, just_under), 400, "invalid")["errors"] == {"pad": ["Unknown field."]}
    assert_error(post_checkout(web, over), 413, "payload_too_large")
    assert_error(post_checkout(web, huge), 413, "payload_too_large")
    assert nothing_written()
    assert post_checkout(web, checkout_body()).status == 201  # the server is fine afterwards


def database_refuses(refuse: bool) -> None:
    """``ALLOW_CONNECTIONS false`` and every other backend of the test database ended: a
    database-scoped "refuses connections" that leaves other databases alone."""
    name = connection.settings_dict["NAME"]
    # A database cannot disallow connections to itself: say it from the maintenance database.
    with psycopg.connect(database_url().rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(not refuse).lower()}')
        if refuse:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
    if not refuse:
        connections.close_all()  # ours were ended too: the next query reconnects


def test_a_database_that_refuses_connections_gets_503_then_service_comes_back(web):
    staff = Client()
    staff.force_login(User.objects.create_superuser("ops", "ops@example.com", "x"))
    session = {"Cookie": f"sessionid={staff.cookies['sessionid'].value}"}
    assert post_checkout(web, checkout_body()).status == 201
    try:
        database_refuses(True)
        for request in (
            lambda: post_checkout(web, checkout_body()),
            lambda: get(web, f"/api/orders/{uuid.uuid4()}/"),
            lambda: get(web, "/api/products/"),
        ):
            started = time.monotonic()
            reply = request()
            assert time.monotonic() - started < 5
            assert_error(reply, 503, "unavailable")
            assert reply.headers["Retry-After"] == "5"
        admin = get(web, "/admin/orders/order/", headers=session)
        assert (admin.status, admin.headers["Retry-After"]) == (503, "5")
        assert get(web, "/readyz").json() == {"database": "down", "broker": "ok"}
    finally:
        database_refuses(False)

    back = time.monotonic()
    while (reply := post_checkout(web, checkout_body())).status != 201:
        assert reply.status == 503, reply.body
        assert time.monotonic() - back < 15, "no service 15 s after the database came back"
        time.sleep(0.2)  # the poll's interval: the loop above waits for the state, bounded at 15 s
    assert get(web, "/admin/orders/order/", headers=session).status == 200


@pytest.mark.parametrize("mode", MODES)
def test_a_database_that_stops_answering_gets_503_within_5_seconds(processes, mode):
    # The web process reaches PostgreSQL through a proxy that then goes silent: its pooled
    # connection and every new one are acknowledged by TCP and never answered.
    StorefrontProduct.objects.create(sku="WIDGET", name="Widget", price=Decimal("19.99"), available=10, version=1)
    proxy = SilenceableProxy(connection.settings_dict["PORT"] or 5432)
    url = database_url().replace(f":{connection.settings_dict['PORT'] or 5432}/", f":{proxy.port}/")
    try:
        web = start_web(processes, mode, env={"DATABASE_URL": url, "GATEWAY_DATABASE_URL": url})
        assert post_checkout(web, checkout_body()).status == 201  # a pooled connection is open
        proxy.go_silent()
        for request in (lambda: post_checkout(web, checkout_body()), lambda: get(web, f"/api/orders/{uuid.uuid4()}")):
            started = time.monotonic()
            reply = request()
            assert time.monotonic() - started < 5
            assert_error(reply, 503, "unavailable")
            assert reply.headers["Retry-After"] == "5"
        assert Order.objects.count() == 1
    finally:
        proxy.close()


def test_a_lock_timeout_is_a_conflict_not_an_outage():
    # A real SQLSTATE 55P03 from PostgreSQL: another connection holds the row, ours gives up.
    order = Order.objects.create(customer_id="c", total=Decimal("1.00"), currency="USD")
    holder_ready, release = threading.Event(), threading.Event()

    def hold_the_lock():
        try:
            with transaction.atomic():
                list(Order.objects.select_for_update().filter(pk=order.pk))
                holder_ready.set()
                release.wait(10)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        assert holder_ready.wait(10)
        with pytest.raises(OperationalError) as raised, transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '100ms'")
            list(Order.objects.select_for_update().filter(pk=order.pk))
    finally:
        release.set()
        holder.join(10)
    status, body = database_error_body(raised.value)
    assert (status, body["code"]) == (409, "locked")
    assert database_error_body(OperationalError("connection refused"))[0] == 503


def test_a_write_refused_as_read_only_is_an_outage_not_a_bug():
    # a standby (a demoted primary, mid-failover) refuses the write with SQLSTATE 25006
    with pytest.raises(InternalError) as raised, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION READ ONLY")
            cursor.execute("CREATE TEMPORARY TABLE refused (id int)")
    status, body = database_error_body(raised.value)
    assert (status, body["code"]) == (503, "unavailable")
    assert database_error_body(InternalError("another internal error")) is None  # still a bug: 500
