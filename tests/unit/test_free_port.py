"""faultlib's free_port: a test picks several ports before its processes bind them, so a port the
kernel offers again must not be handed out twice."""

from types import SimpleNamespace

import pytest

from faultlib import processes


class OfferedSocket:
    """A socket whose bind to port 0 gets the next of ``offers``, as the kernel might give them."""

    offers: list[int] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def bind(self, address):
        self.port = self.offers.pop(0)

    def getsockname(self):
        return ("127.0.0.1", self.port)


@pytest.fixture
def offered(monkeypatch):
    # faultlib.processes's own name for the module, not the socket module every other caller uses
    monkeypatch.setattr(processes, "socket", SimpleNamespace(socket=OfferedSocket))
    monkeypatch.setattr(processes, "_ports_handed_out", set())
    return OfferedSocket.offers


def test_a_port_offered_again_is_skipped(offered):
    offered[:] = [41001, 41001, 41001, 41002]
    assert (processes.free_port(), processes.free_port()) == (41001, 41002)
    assert offered == []


def test_a_kernel_that_offers_only_handed_out_ports_is_an_error(offered):
    offered[:] = [41001] * 101
    assert processes.free_port() == 41001
    with pytest.raises(RuntimeError, match="no free port in 100 tries"):
        processes.free_port()
    assert offered == []
