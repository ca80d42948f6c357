"""faultlib's free_base: a test cluster's ports are bindable and below the kernel's ephemeral range,
where the local end of an outgoing connection could take one before the node binds it (a RabbitMQ
node whose distribution port is held that way dies at boot without a log)."""

import socket

import pytest

from faultlib import ports


class Bases:
    """An rng whose randrange hands out ``bases`` in turn."""

    def __init__(self, *bases: int) -> None:
        self.bases = list(bases)

    def randrange(self, low: int, high: int) -> int:
        base = self.bases.pop(0)
        assert low <= base < high
        return base


@pytest.fixture
def held_port():
    """A port held as the local end of an outgoing connection: nothing listens on it."""
    with socket.create_server(("127.0.0.1", 0)) as server, socket.socket() as client:
        client.bind(("127.0.0.1", 0))
        client.connect(server.getsockname())
        accepted, _ = server.accept()
        with accepted:
            yield client.getsockname()[1]


def test_a_port_held_by_a_connection_is_not_bindable_and_its_base_is_skipped(held_port, monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_low", lambda: 65536)
    assert socket.socket().connect_ex(("127.0.0.1", held_port)) != 0  # what a connect check saw: free
    assert ports.bindable(held_port) is False
    free = next(p for p in range(12000, 12100) if ports.bindable(p) and p != held_port)
    rng = Bases(held_port, free)
    assert ports.free_base(rng, 1, 65536, lambda base: [base]) == free
    assert rng.bases == []


def test_bases_whose_ports_reach_the_ephemeral_range_are_refused(monkeypatch):
    monkeypatch.setattr(ports, "ephemeral_low", lambda: 32768)
    rng = Bases(*[12768] * 50)  # its distribution port would be 32768
    with pytest.raises(RuntimeError, match=r"no free ports for a test cluster in \[10000, 12769\) below 32768"):
        ports.free_base(rng, 10000, 12769, lambda base: [base, base + 20000])
    assert rng.bases == []


def test_the_ranges_of_the_test_clusters_lie_below_this_machines_ephemeral_range():
    from faultlib import cluster, postgres

    highest = cluster.BASES[1] - 1
    assert max(cluster._node_ports(3)(highest)) < ports.ephemeral_low()
    highest = postgres.BASES[1] - 1
    assert max(postgres.PgCluster("probe", highest).ports()) < ports.ephemeral_low()
