"""Errors answered outside the API's views, in the API's error shape.

Every error a client gets is ``{"code": ..., "detail": ...}`` JSON, whether a view raised it or
Django did before any view ran (a disallowed ``Host``, a body over Django's own limits, an
unknown path, a crash in a middleware). The admin is the exception: a person reads it in a
browser, so it keeps Django's HTML error pages.

Django's handlers below serve ``DEBUG`` off; with ``DEBUG`` on Django shows its technical pages
instead, except for what ``service_platform.middleware.RequestShapeMiddleware`` answers itself (the
``Host`` and the body's framing), which is the same in both modes.
"""

from functools import wraps

from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

ADMIN_PREFIX = "/admin/"


def json_error(status: int, code: str, detail: str, headers: dict | None = None) -> JsonResponse:
    # ensure_ascii (JsonResponse's default): any echoed client text, a lone surrogate included,
    # is escaped, so the body can always be encoded.
    return JsonResponse({"code": code, "detail": detail}, status=status, headers=headers)


def is_admin_page(request: HttpRequest) -> bool:
    return request.path_info.startswith(ADMIN_PREFIX)


def disallowed_host() -> JsonResponse:
    # The Host is not echoed: the answer says nothing about which hosts this server serves.
    return json_error(400, "disallowed_host", "The Host header names no site this server serves.")


def bad_request(request, exception):
    if is_admin_page(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return json_error(413, "payload_too_large", "The request body is too large.")
    if isinstance(exception, DisallowedHost):
        return disallowed_host()
    return json_error(400, "bad_request", "The request is malformed.")


def permission_denied(request, exception):
    if is_admin_page(request):
        return defaults.permission_denied(request, exception)
    return json_error(403, "forbidden", "You may not do this.")


def page_not_found(request, exception):
    if is_admin_page(request):
        return defaults.page_not_found(request, exception)
    return json_error(404, "not_found", f"No such page: {request.path}")


def server_error(request):
    if is_admin_page(request):
        return defaults.server_error(request)
    return json_error(500, "server_error", "An unexpected error occurred.")


def allow_methods(*methods: str):
    """Answer other methods ``405`` in JSON with ``Allow``. CSRF-exempt, because the view
    changes nothing: without it a ``POST`` would get the CSRF failure page (403) first."""
    allowed = ", ".join(methods)

    def decorate(view):
        @wraps(view)
        def checked(request, *args, **kwargs):
            if request.method not in methods:
                return json_error(
                    405, "method_not_allowed", f"Method {request.method} is not allowed here.", {"Allow": allowed}
                )
            return view(request, *args, **kwargs)

        return csrf_exempt(checked)

    return decorate
