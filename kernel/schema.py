"""OpenAPI pieces shared by the API views: the error body and its examples."""

from drf_spectacular.utils import OpenApiExample, OpenApiResponse
from rest_framework import serializers


class ErrorSerializer(serializers.Serializer):
    """Every error body (see ``kernel.exceptions``)."""

    code = serializers.CharField(help_text="Machine-readable, e.g. `invalid`, `not_found`, `idempotency_key_reused`.")
    detail = serializers.CharField(help_text="Human-readable.")
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="Only for validation errors: messages per field (nested fields as `items.0.quantity`).",
    )


def error_response(description: str, *examples: tuple[str, dict]) -> OpenApiResponse:
    return OpenApiResponse(
        ErrorSerializer,
        description=description,
        examples=[OpenApiExample(name, value=value, response_only=True) for name, value in examples],
    )


NOT_FOUND = error_response("No such order.", ("Unknown order", {"code": "not_found", "detail": "No such order."}))
THROTTLED = error_response(
    "Too many requests from this client (`CHECKOUT_THROTTLE`); `Retry-After` says when to try again.",
    ("Throttled", {"code": "throttled", "detail": "Request was throttled. Expected available in 42 seconds."}),
)
