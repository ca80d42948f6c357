"""A HEAD request is answered without a body by the application itself.

Django's handler renders a HEAD request as a GET, body included; gunicorn then drops the body
and logs a warning for every such request ("WSGI app sent body bytes on a no-body response").
The headers stay those of the GET (its ``Content-Length`` too), as RFC 9110 asks of HEAD.
"""


class WithoutBodyOnHead:
    def __init__(self, application):
        self.application = application

    def __call__(self, environ, start_response):
        result = self.application(environ, start_response)
        if environ.get("REQUEST_METHOD") != "HEAD":
            return result
        try:
            for _ in result:  # a streamed response calls start_response only once iterated
                pass
        finally:
            if hasattr(result, "close"):
                result.close()
        return []
