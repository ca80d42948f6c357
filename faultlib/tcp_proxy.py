"""A TCP proxy on 127.0.0.1 that a test can make go silent: a database that stops answering.

Forwarding, it is transparent. Silent, it stops passing bytes either way on the connections it
holds and accepts new ones without a word, so the client's kernel still sees its packets
acknowledged: neither a refusal nor a reset, only silence, as with a hung server.
"""

import selectors
import socket
import threading


class SilenceableProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.silent = threading.Event()
        self.closed = threading.Event()
        self.accepted = 0
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True, name="proxy-accept").start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self._sockets.append(client)
            if self.silent.is_set():
                continue  # held, never answered
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.append(upstream)
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True, name="proxy-pipe").start()

    def _pipe(self, client: socket.socket, upstream: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(client, selectors.EVENT_READ, upstream)
        selector.register(upstream, selectors.EVENT_READ, client)
        try:
            while not self.closed.is_set():
                for key, _ in selector.select(timeout=0.2):
                    if self.silent.is_set():
                        continue
                    data = key.fileobj.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
                if self.silent.is_set():
                    selector.close()
                    self.closed.wait()  # keep both sockets open and say nothing
                    return
        except OSError:
            return
        finally:
            selector.close()

    def go_silent(self) -> None:
        self.silent.set()

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
        with self._lock:
            for sock in self._sockets:
                try:
                    sock.close()
                except OSError:
                    pass
