"""service_platform.head_requests: a HEAD request gets the GET's status and headers, and no body."""

from service_platform.head_requests import WithoutBodyOnHead

HEADERS = [("Content-Type", "text/plain"), ("Content-Length", "5")]


class Body(list):
    closed = False

    def close(self):
        self.closed = True


MADE: list[Body] = []


def django_like(environ, start_response):
    start_response("200 OK", HEADERS)
    MADE.append(Body([b"hello"]))
    return MADE[-1]


def streamed(environ, start_response):
    start_response("200 OK", HEADERS)  # only once iterated, as a generator does
    yield b"hel"
    yield b"lo"


def call(app, method: str) -> tuple[list, bytes, object]:
    started = []

    def start_response(status, headers):
        started.append((status, headers))

    result = WithoutBodyOnHead(app)({"REQUEST_METHOD": method}, start_response)
    return started, b"".join(result), result


def test_get_passes_through_untouched():
    started, body, result = call(django_like, "GET")

    assert (started, body, result.closed) == ([("200 OK", HEADERS)], b"hello", False)  # the server closes it


def test_head_keeps_the_status_and_headers_and_sends_no_body():
    started, body, result = call(django_like, "HEAD")

    assert (started, body, result) == ([("200 OK", HEADERS)], b"", [])
    assert MADE[-1].closed  # the application's own result is closed here, as a server would


def test_head_of_a_streamed_response_starts_it_and_sends_no_body():
    started, body, _ = call(streamed, "HEAD")

    assert (started, body) == ([("200 OK", HEADERS)], b"")
