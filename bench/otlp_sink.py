"""A local OTLP/HTTP endpoint for the tracing figure: takes every export, answers 200, counts them.

It stands where a collector would; it does not decode (a collector's cost is not ours to measure).
"""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OtlpSink:
    def __init__(self) -> None:
        self.exports = 0
        self.bytes = 0
        sink = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a collector would

            def do_POST(self):
                size = len(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with lock:
                    sink.exports += 1
                    sink.bytes += size
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
