"""One error body everywhere in the API:

    {"code": "<machine-readable>", "detail": "<human-readable>", "errors": {"<field>": ["..."]}}

``errors`` only for validation errors; nested fields are flattened (``items.0.quantity``).
"""

import logging

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response

logger = logging.getLogger(__name__)


class ApiError(exceptions.APIException):
    """An API error with its own status and code, raised by views for domain outcomes."""

    def __init__(self, status_code: int, code: str, detail: str):
        super().__init__(detail=detail, code=code)
        self.status_code = status_code
        self.code = code


def flatten_errors(detail, prefix: str = "") -> dict[str, list[str]]:
    """Turn DRF's nested error structure into ``{"field.sub": ["message", ...]}``."""
    flat: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "body" if key == "non_field_errors" and not prefix else str(key)
            flat.update(flatten_errors(value, f"{prefix}.{name}" if prefix else name))
    elif isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            flat.setdefault(prefix or "body", []).extend(str(item) for item in detail)
        else:
            for index, item in enumerate(detail):
                flat.update(flatten_errors(item, f"{prefix}.{index}" if prefix else str(index)))
    else:
        flat.setdefault(prefix or "body", []).append(str(detail))
    return flat


def api_exception_handler(exc, context):
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()

    if isinstance(exc, exceptions.ValidationError):
        body = {"code": "invalid", "detail": "The request is invalid.", "errors": flatten_errors(exc.detail)}
    elif isinstance(exc, exceptions.ParseError):
        body = {"code": "parse_error", "detail": str(exc.detail), "errors": {"body": [str(exc.detail)]}}
    elif isinstance(exc, ApiError):
        body = {"code": exc.code, "detail": str(exc.detail)}
    elif isinstance(exc, exceptions.APIException):
        body = {"code": exc.default_code, "detail": str(exc.detail)}
    else:
        logger.exception("unhandled error in %s", context.get("view").__class__.__name__)
        return Response(
            {"code": "server_error", "detail": "An unexpected error occurred."},
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )

    response = Response(body, status=exc.status_code)
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        response["Retry-After"] = str(int(exc.wait))
    return response
