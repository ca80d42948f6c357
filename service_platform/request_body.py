"""Request bodies sent with ``Transfer-Encoding: chunked``, which Django cannot read itself.

Django sizes a body by ``Content-Length`` alone: a chunked body has none, so Django reads it as
empty and a checkout would be refused for a missing ``customer_id``, never for what it sent.
This WSGI wrapper reads a chunked body when the server has decoded it and marks the end of the
stream (``wsgi.input_terminated``, which gunicorn sets), up to the API's body limit, and hands
it to Django with its real ``Content-Length``. Where the body cannot be read (``runserver``
hands Django a stream cut to ``Content-Length``) or is over the limit, it marks the request and
``service_platform.middleware.RequestShapeMiddleware`` answers ``411`` or ``413``, in JSON and with the
usual headers. Behind nginx (``make serve``) bodies arrive with a ``Content-Length``.
"""

import io

from django.conf import settings

BODY_REFUSED = "saga_shop.body_refused"  # environ key: "length_required" or "too_large"


def is_chunked(environ: dict) -> bool:
    return "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()


class ChunkedBodyReader:
    def __init__(self, application):
        self.application = application

    def __call__(self, environ, start_response):
        if is_chunked(environ):
            buffer_chunked_body(environ, settings.API_MAX_BODY_BYTES)
        return self.application(environ, start_response)


def buffer_chunked_body(environ: dict, limit: int) -> None:
    """Replace a chunked body by the bytes it carried and their ``Content-Length``, or mark it."""
    body = b""
    if not environ.get("wsgi.input_terminated"):
        environ[BODY_REFUSED] = "length_required"
    else:
        body = environ["wsgi.input"].read(limit + 1)
        if len(body) > limit:
            environ[BODY_REFUSED], body = "too_large", b""
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    del environ["HTTP_TRANSFER_ENCODING"]
