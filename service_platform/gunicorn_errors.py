"""gunicorn's own error answers in the API's JSON error shape, with the security headers.

gunicorn answers some requests itself, before Django sees them: a header value with a control
character, a request line it cannot parse, a chunk it cannot read. It writes those answers in
HTML with ``gunicorn.util.write_error``; ``service_platform/gunicorn.conf.py`` replaces that function
with :func:`write_json_error`. nginx (``make serve``) answers most such requests before they
get here, but passes header values gunicorn refuses (control characters other than NUL, CR
and LF): this is what the client then sees.
"""

import json

from gunicorn import util

CODES = {
    400: "bad_request",
    403: "forbidden",
    414: "uri_too_long",
    417: "expectation_failed",
    431: "headers_too_large",
    500: "server_error",
    501: "not_implemented",
}
# The same headers as deploy/nginx/error_headers.conf: what Django puts on its own answers, a
# policy that lets a JSON body load nothing, and no caching of an error.
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
    "Cache-Control": "no-store",
}


def write_json_error(sock, status_int: int, reason: str, mesg: str) -> None:
    """``gunicorn.util.write_error``'s signature; ``mesg`` names what was wrong (JSON-escaped)."""
    code = CODES.get(status_int, "server_error" if status_int >= 500 else "bad_request")
    body = json.dumps({"code": code, "detail": mesg or reason}).encode("ascii")
    head = [f"HTTP/1.1 {status_int} {reason}", "Connection: close", "Content-Type: application/json"]
    head += [f"Content-Length: {len(body)}", *(f"{name}: {value}" for name, value in HEADERS.items())]
    util.write_nonblock(sock, "\r\n".join([*head, "", ""]).encode("latin-1") + body)


def install() -> None:
    # gunicorn has no hook for this; fail loudly if a new version no longer calls this function.
    if not callable(getattr(util, "write_error", None)):
        raise RuntimeError(
            "gunicorn.util.write_error is gone: service_platform/gunicorn_errors.py needs another way in"
        )
    util.write_error = write_json_error
