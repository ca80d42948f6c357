"""One error body everywhere in the API:

    {"code": "<machine-readable>", "detail": "<human-readable>", "errors": {"<field>": ["..."]}}

``errors`` only for validation errors; nested fields are flattened (``items.0.quantity``).

The database failing is not the client's fault and not a bug either: a database that refuses
connections, does not answer (a connect or pool timeout) or drops the connection gives ``503``
``unavailable`` with ``Retry-After``; a lock timeout (SQLSTATE 55P03) means a concurrent request
holds what this one needs, so ``409``; a write refused as read-only (SQLSTATE 25006: the server is a
standby now, a failover) is ``503`` too. Any other error is a bug: ``500``, logged.
"""

import logging

from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.db import InterfaceError, InternalError, OperationalError
from django.http import Http404
from reliable_messaging.hosting import LOCK_NOT_AVAILABLE, READ_ONLY_SQL_TRANSACTION, sqlstate_of
from rest_framework import exceptions, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5


class ApiError(exceptions.APIException):
    """An API error with its own status and code, raised by views for domain outcomes."""

    def __init__(self, status_code: int, code: str, detail: str):
        super().__init__(detail=detail, code=code)
        self.status_code = status_code
        self.code = code


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "payload_too_large"
    default_detail = "The request body is too large."

    def __init__(self, limit: int | None = None):
        super().__init__(detail=f"The request body is larger than {limit} bytes." if limit else None)


class JSONParseError(exceptions.ParseError):
    """A body that is not acceptable JSON; ``errors`` names the paths at fault, where there are
    any (a duplicated key), else the answer says ``{"body": [detail]}``."""

    def __init__(self, detail: str, errors: dict[str, list[str]] | None = None):
        super().__init__(detail=detail)
        self.errors = errors


def database_error_body(exc: BaseException) -> tuple[int, dict] | None:
    """``(status, body)`` for a database error that is not a bug; None for any other error."""
    read_only = isinstance(exc, InternalError) and sqlstate_of(exc) == READ_ONLY_SQL_TRANSACTION
    if not (read_only or isinstance(exc, OperationalError | InterfaceError)):
        return None
    if sqlstate_of(exc) == LOCK_NOT_AVAILABLE:
        return 409, {"code": "locked", "detail": "A concurrent request holds what this one needs; try again."}
    return 503, {"code": "unavailable", "detail": "The database is unavailable; try again shortly."}


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


class BadRequest(exceptions.APIException):
    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "bad_request"
    default_detail = "The request is malformed."


def api_exception_handler(exc, context):
    # An error is JSON even from a view that renders something else (the schema's YAML, the
    # docs' HTML page): otherwise that renderer would render the error body.
    if request := context.get("request"):
        request.accepted_renderer, request.accepted_media_type = JSONRenderer(), "application/json"
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge()
    elif isinstance(exc, SuspiciousOperation):  # too many query fields, say: the client's fault
        exc = BadRequest()

    if answer := database_error_body(exc):
        status_code, body = answer
        logger.warning("database error answered %d: %s: %s", status_code, type(exc).__name__, exc)
        return Response(body, status=status_code, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    if isinstance(exc, exceptions.ValidationError):
        body = {"code": "invalid", "detail": "The request is invalid.", "errors": flatten_errors(exc.detail)}
    elif isinstance(exc, exceptions.ParseError):
        errors = getattr(exc, "errors", None) or {"body": [str(exc.detail)]}
        body = {"code": "parse_error", "detail": str(exc.detail), "errors": errors}
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
