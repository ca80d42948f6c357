"""OpenAPI documentation of the orders API: the checkout body as documented, descriptions and
examples. Schema only: validation stays in ``orders.apis``."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema_serializer
from rest_framework import serializers

from kernel.schema import error_response

CHECKOUT_DESCRIPTION = """Creates a PENDING order and its `orders.order.created` event in one transaction.
Payments charges, inventory reserves, and the order becomes CONFIRMED or FAILED: poll
`GET /api/orders/{id}/` to follow it.

The same `Idempotency-Key` with the same body (compared as canonical JSON) returns the stored
response with `Idempotent-Replayed: true`; with another body it is a 422; while the first
request is still in flight, a 409. Test tokens: `tok_visa` is charged, `tok_chargeDeclined`
and any unknown token are declined."""


@extend_schema_serializer(component_name="CheckoutItem")
class CheckoutItemSerializer(serializers.Serializer):
    sku = serializers.CharField(
        max_length=64, help_text='Exactly as listed (never trimmed: `" WIDGET"` is unknown); each at most once.'
    )
    quantity = serializers.IntegerField(min_value=1, max_value=1000)


@extend_schema_serializer(component_name="Checkout")
class CheckoutBodySerializer(serializers.Serializer):
    """The checkout body as documented; ``CheckoutApi.InputSerializer`` validates it."""

    customer_id = serializers.CharField(
        min_length=1, max_length=255, help_text="Kept verbatim; a value beginning or ending with whitespace is refused."
    )
    items = serializers.ListField(child=CheckoutItemSerializer(), min_length=1, max_length=50)
    payment_token = serializers.CharField(
        min_length=1, max_length=255, help_text="Shown only masked outside payments (`tok_****`)."
    )
    ship_to = serializers.CharField(
        required=False,
        min_length=2,
        max_length=2,
        help_text="The ISO 3166 country to ship to (two capital letters). The orchestrated saga asks shipping "
        "first, and shipping refuses a country it does not serve (AQ): the order fails, charge refunded.",
    )


def _event(event_type: str, message_id: str, at: str, published: str | None, cause: str | None = None) -> dict:
    state = "published" if published else "pending"
    return {
        "event_type": event_type,
        "message_id": message_id,
        "occurred_at": at,
        "published_at": published,
        "source": event_type.split(".")[0],
        "causation_id": cause,
        "state": state,
    }


_ORDER = {
    "id": "0b8f7e4e-2f36-4d6f-9a51-1d6c3c9b7a10",
    "failure_reason": None,
    "customer_id": "alice",
    "total": "39.98",
    "currency": "USD",
    "items": [{"sku": "WIDGET", "quantity": 2, "unit_price": "19.99"}],
    "created_at": "2026-11-22T10:00:00.000000Z",
}
_CREATED = "5f3a0c1e-8c2b-4c41-9f0e-2a7d1b6e4c01"
_CHARGED = "8d1e2f3a-4b5c-4d6e-8f70-9a1b2c3d4e02"
_RESERVED = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c03"
ORDER_PLACED = OpenApiExample(
    "Just placed",
    value={
        **_ORDER,
        "status": "PENDING",
        "updated_at": "2026-11-22T10:00:00.000000Z",
        "timeline": [_event("orders.order.created", _CREATED, "2026-11-22T10:00:00.000000Z", None)],
    },
    response_only=True,
    status_codes=["201"],
)
ORDER_CONFIRMED = OpenApiExample(
    "Confirmed",
    value={
        **_ORDER,
        "status": "CONFIRMED",
        "updated_at": "2026-11-22T10:00:00.090000Z",
        "timeline": [
            _event("orders.order.created", _CREATED, "2026-11-22T10:00:00.000000Z", "2026-11-22T10:00:00.010000Z"),
            _event(
                "payments.payment.succeeded",
                _CHARGED,
                "2026-11-22T10:00:00.030000Z",
                "2026-11-22T10:00:00.040000Z",
                _CREATED,
            ),
            _event(
                "inventory.stock.reserved",
                _RESERVED,
                "2026-11-22T10:00:00.060000Z",
                "2026-11-22T10:00:00.070000Z",
                _CHARGED,
            ),
            _event(
                "orders.order.confirmed",
                "2c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e04",
                "2026-11-22T10:00:00.090000Z",
                None,
                _RESERVED,
            ),
        ],
    },
    response_only=True,
    status_codes=["200"],
)


CHECKOUT_HEADERS = [
    OpenApiParameter(
        "Idempotency-Key",
        {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"},
        OpenApiParameter.HEADER,
        required=True,
        description="1-255 printable ASCII characters, e.g. a UUID. Retry with the same key and body "
        "to get the stored response instead of a second order.",
        examples=[OpenApiExample("A UUID", value="8e0f3c4e-7d55-4b0e-9c43-3f2f7b8f9a10")],
    ),
    OpenApiParameter(
        "Idempotent-Replayed",
        OpenApiTypes.STR,
        OpenApiParameter.HEADER,
        enum=["true"],
        description="Present when this is the stored response of an earlier request with the same key.",
        response=[201],
    ),
]

CHECKOUT_ERRORS = {
    400: error_response(
        "Invalid body or `Idempotency-Key`; nothing is written and the key is not used up.",
        (
            "Missing key",
            {
                "code": "invalid",
                "detail": "The request is invalid.",
                "errors": {"Idempotency-Key": ["This header is required."]},
            },
        ),
        (
            "Unknown SKU",
            {
                "code": "invalid",
                "detail": "The request is invalid.",
                "errors": {"items": ["unknown sku: NOPE"]},
            },
        ),
        (
            "Bad quantity",
            {
                "code": "invalid",
                "detail": "The request is invalid.",
                "errors": {"items.0.quantity": ["Ensure this value is less than or equal to 1000."]},
            },
        ),
    ),
    409: error_response(
        "A request with this key is still in flight.",
        (
            "In flight",
            {"code": "idempotency_key_in_use", "detail": "A request with this Idempotency-Key is in progress."},
        ),
    ),
    422: error_response(
        "This key was used with a different body.",
        (
            "Reused",
            {
                "code": "idempotency_key_reused",
                "detail": "This Idempotency-Key was used with a different body.",
            },
        ),
    ),
}

CHECKOUT_EXAMPLES = [
    ORDER_PLACED,
    OpenApiExample(
        "Two widgets",
        value={
            "customer_id": "alice",
            "items": [{"sku": "WIDGET", "quantity": 2}],
            "payment_token": "tok_visa",
        },
        request_only=True,
    ),
    OpenApiExample(
        "A declined card",
        value={
            "customer_id": "bob",
            "items": [{"sku": "GADGET", "quantity": 1}],
            "payment_token": "tok_chargeDeclined",
        },
        request_only=True,
    ),
]
