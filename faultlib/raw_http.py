"""Exact HTTP requests over a plain socket, for what a client library would normalise (the
``Host`` header, chunked framing, header case): the bytes go out as written."""

import http.client
import socket
from urllib.parse import urlsplit

from faultlib.web import Reply


def raw_request(base: str, request: bytes, *, timeout: float = 15) -> Reply:
    """Send ``request`` as is to the server at ``base``; its parsed answer."""
    address = urlsplit(base)
    with socket.create_connection((address.hostname, address.port), timeout=timeout) as sock:
        sock.sendall(request)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return Reply(response.status, response.read(), dict(response.headers))


def request_bytes(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    """An HTTP/1.1 request, headers in the given order and spelling; ``Connection: close``."""
    lines = [f"{method} {path} HTTP/1.1", *(f"{name}: {value}" for name, value in headers.items()), "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked(body: bytes, size: int = 64) -> bytes:
    """``body`` in chunks of ``size`` bytes, with the closing zero-length chunk."""
    parts = [b"%x\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size)]
    return b"".join(parts) + b"0\r\n\r\n"
