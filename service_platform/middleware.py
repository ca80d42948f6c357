"""The project's middleware: malformed requests, trace context, ``/api/`` paths, database outages.

W3C Trace Context for every request: continue the caller's trace or start one.

With tracing on, the request's span is OpenTelemetry's SERVER span (Django's instrumentation
continued the caller's ``traceparent``); without, a span id of our own under the caller's trace.
Events published while serving it store that span with their outbox row, the relay's span for
each is its child, and so on through every hop (``reliable_messaging._telemetry``). The response says which
span served it (``traceresponse``, Trace Context Level 2). Log lines of the request carry
``trace_id`` and ``span_id``.
"""

import logging

import structlog
from django.core.exceptions import DisallowedHost
from django.http import HttpResponse, JsonResponse
from django.urls import is_valid_path
from reliable_messaging.hosting import server_span, span_in_use, trace_headers, trace_ids

from kernel.exceptions import RETRY_AFTER_SECONDS, database_error_body
from service_platform.errors import disallowed_host, is_admin_page, json_error
from service_platform.request_body import BODY_REFUSED

logger = logging.getLogger(__name__)
host_logger = logging.getLogger("django.security.DisallowedHost")


def refusal(request) -> JsonResponse | None:
    """What is wrong with a request before any view can look at it, answered in JSON with the
    same status in ``DEBUG`` on and off (Django itself would answer the ``Host`` with an HTML
    page, its technical one under ``DEBUG``); None when nothing is:

    - a ``Host`` outside ``ALLOWED_HOSTS`` → ``400`` ``disallowed_host`` (the admin keeps
      Django's own page);
    - a chunked body ``service_platform.request_body`` could not read → ``411`` ``length_required``, or
      over the limit → ``413`` ``payload_too_large``.
    """
    try:
        request.get_host()
    except DisallowedHost as exc:
        if not is_admin_page(request):
            host_logger.error("%s", exc)
            return disallowed_host()
    refused = request.META.get(BODY_REFUSED)
    if refused == "length_required":
        return json_error(411, "length_required", "Send the body with a Content-Length.")
    if refused == "too_large":
        return json_error(413, "payload_too_large", "The request body is too large.")
    return None


class RequestShapeMiddleware:
    """Answers ``refusal`` before anything else reads the request. Inside Django's
    ``SecurityMiddleware``, so the refusal gets its headers. (With ``HTTPS=1`` a plain-HTTP
    request is redirected by that middleware first, which reads the ``Host`` itself: a
    disallowed one there gets ``handler400``'s JSON, without that middleware's own headers.)"""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return refusal(request) or self.get_response(request)


class TraceparentMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        span = server_span(request.headers)
        with span_in_use(span), structlog.contextvars.bound_contextvars(**trace_ids(span)):
            response = self.get_response(request)
        response["traceresponse"] = trace_headers(span)["traceparent"]
        return response


class ApiPathMiddleware:
    """``/api/`` paths answer the same with or without the trailing slash; unknown ones get JSON.

    Django's ``APPEND_SLASH`` would redirect, which a client's POST cannot follow (with
    ``DEBUG`` on it even raises), and an unknown path would get an HTML page. So before
    ``CommonMiddleware``: a path that only resolves with its slash is served as that path, and
    a path that resolves neither way is a JSON ``404``, with ``DEBUG`` on or off.
    """

    PREFIX = "/api/"

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path_info
        if path.startswith(self.PREFIX) or path == self.PREFIX.rstrip("/"):
            urlconf = getattr(request, "urlconf", None)
            if not is_valid_path(path, urlconf):
                if not path.endswith("/") and is_valid_path(f"{path}/", urlconf):
                    request.path_info, request.path = f"{path}/", f"{request.path}/"
                else:
                    return JsonResponse({"code": "not_found", "detail": f"No such API endpoint: {path}"}, status=404)
        return self.get_response(request)


class DatabaseUnavailableMiddleware:
    """A database outage outside the API's views (the admin, say) is a ``503``, not a ``500``.

    API views answer for themselves (``kernel.exceptions.api_exception_handler``).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        answer = database_error_body(exception)
        if answer is None:
            return None
        status, body = answer
        logger.warning("database error answered %d: %s: %s", status, type(exception).__name__, exception)
        if request.path_info.startswith(ApiPathMiddleware.PREFIX):
            response = JsonResponse(body, status=status)
        else:
            response = HttpResponse(f"{body['detail']}\n", status=status, content_type="text/plain; charset=utf-8")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
