"""Property-based: schemathesis against the OpenAPI schema and the live API, served by
gunicorn as in production. No 5xx, and no response outside the schema.

Bounded: SCHEMATHESIS_EXAMPLES examples per operation (default 25), derandomized so CI is
repeatable; raise it locally to search harder.
"""

import json
import os
import secrets
import subprocess
import sys
from decimal import Decimal

import pytest
import requests
import schemathesis
from django.conf import settings as django_settings
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from faultlib.processes import BASE_DIR, database_url, free_port, wait_until
from orders.models import StorefrontProduct

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "25"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture(scope="module")
def live_api(django_db_setup, django_db_blocker, tmp_path_factory):
    """gunicorn on a free port of 127.0.0.1, DEBUG off, on the test database and vhost."""
    with django_db_blocker.unblock():
        for sku, price, available in [("WIDGET", "19.99", 10), ("SOLD-OUT", "5.00", 0)]:
            StorefrontProduct.objects.create(
                sku=sku, name=sku.title(), price=Decimal(price), available=available, version=1
            )
        port = free_port()
        log = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
        env = {
            **os.environ,
            "DEBUG": "0",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "MESSAGING_ENCRYPTION_KEYS": django_settings.DEVELOPMENT_ENCRYPTION_KEYS,
            "ALLOWED_HOSTS": "127.0.0.1",
            "DATABASE_URL": database_url(),
            "GATEWAY_DATABASE_URL": database_url(),
            "WEB_CONCURRENCY": "2",
            "CHECKOUT_THROTTLE": "off",
        }
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "config.wsgi",
                "-c",
                "service_platform/gunicorn.conf.py",
                "--bind",
                f"127.0.0.1:{port}",
            ],
            cwd=BASE_DIR,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until(lambda: answers(f"{base}/healthz"), timeout=30, message="gunicorn to answer")
            yield base
        finally:
            server.terminate()
            server.wait(timeout=30)
            print(log.read_text()[-5000:])


@pytest.fixture
def catalogue(transactional_db):
    # Committed, so the server sees them; the transactional test flushes what it wrote after.
    for sku, price, available in [("WIDGET", "19.99", 10), ("SOLD-OUT", "5.00", 0)]:
        StorefrontProduct.objects.get_or_create(
            sku=sku, defaults={"name": sku.title(), "price": Decimal(price), "available": available, "version": 1}
        )


def generated_schema() -> dict:
    """The document /api/schema/ serves, generated in this process (Django is set up by now)."""
    return json.loads(OpenApiJsonRenderer().render(SchemaGenerator().get_schema(request=None, public=True)))


schema = schemathesis.openapi.from_dict(generated_schema())


def test_the_server_serves_the_schema_under_test(live_api):
    assert requests.get(f"{live_api}/api/schema/?format=json", timeout=10).json() == generated_schema()


@pytest.mark.django_db(transaction=True)
@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_the_live_api_keeps_to_its_schema(case, live_api, catalogue):
    case.call_and_validate(base_url=live_api, checks=CHECKS, timeout=10)
