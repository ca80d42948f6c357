"""The OpenAPI document: valid, complete, and saying what the contract says."""

import pytest
from django.test import Client
from django.urls import get_resolver
from drf_spectacular.validation import validate_schema

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema(django_db_blocker) -> dict:
    with django_db_blocker.unblock():
        response = Client().get("/api/schema/", headers={"Accept": "application/vnd.oai.openapi+json"})
    assert response.status_code == 200
    return response.json()


def test_the_schema_is_valid_openapi_3(schema):
    validate_schema(schema)  # raises on any violation of the OpenAPI 3.0 JSON schema
    assert schema["openapi"].startswith("3.")


def test_every_api_endpoint_is_documented(schema):
    assert sorted((path, method) for path, item in schema["paths"].items() for method in item) == [
        ("/api/checkout/", "post"),
        ("/api/orders/{order_id}/", "get"),
        ("/api/orders/{order_id}/cancel/", "post"),
        ("/api/orders/{order_id}/return/", "post"),
        ("/api/products/", "get"),
        ("/healthz", "get"),
        ("/readyz", "get"),
    ]
    # Every route under /api/ other than the schema and docs themselves.
    routes = {str(p.pattern) for p in get_resolver().url_patterns if str(p.pattern).startswith("api/")}
    assert routes == {"api/", "api/schema/", "api/docs/"}


def test_checkout_documents_its_idempotency_key_body_and_errors(schema):
    checkout = schema["paths"]["/api/checkout/"]["post"]
    [key] = [p for p in checkout["parameters"] if p["name"] == "Idempotency-Key"]
    assert (key["in"], key["required"]) == ("header", True)
    assert key["schema"] == {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"}
    assert sorted(checkout["responses"]) == ["201", "400", "409", "422", "429"]
    assert checkout["responses"]["201"]["headers"]["Idempotent-Replayed"]["schema"]["enum"] == ["true"]
    body = checkout["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/CheckoutRequest"}
    assert body["examples"]["TwoWidgets"]["value"]["payment_token"] == "tok_visa"
    for status in ("400", "409", "422", "429"):
        assert checkout["responses"][status]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/Error"
        }
    conflict = checkout["responses"]["422"]["content"]["application/json"]["examples"]["Reused"]["value"]
    assert conflict["code"] == "idempotency_key_reused"


def test_the_error_shape_and_the_order_are_components(schema):
    components = schema["components"]["schemas"]
    assert components["Error"]["required"] == ["code", "detail"]
    assert sorted(components["Error"]["properties"]) == ["code", "detail", "errors"]
    assert sorted(components["Order"]["properties"]) == [
        "created_at",
        "currency",
        "customer_id",
        "failure_reason",
        "id",
        "items",
        "saga_style",
        "ship_to",
        "status",
        "timeline",
        "total",
        "updated_at",
    ]
    statuses = ["PENDING", "CONFIRMED", "FAILED", "CANCELLED", "RETURNING", "RETURNED"]
    assert components["OrderStatusEnum"]["enum"] == statuses
    items = components["CheckoutRequest"]["properties"]["items"]
    assert (items["minItems"], items["maxItems"]) == (1, 50)


def test_the_docs_page_serves_swagger_ui_from_our_own_static_files():
    response = Client().get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn." not in html and "https://" not in html
