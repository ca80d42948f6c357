"""One relay process runs several pipelines: one that dies stops the others."""

import threading


def test_a_relay_pipeline_that_dies_stops_the_others_and_the_process_exits_1(monkeypatch):
    from reliable_messaging import _relay as relay_module
    from reliable_messaging._lifecycle import Stopper

    started = threading.Barrier(3, timeout=10)

    def run(self, once: bool) -> int:
        if threading.current_thread().name == "relay-1":
            started.wait()
            raise RuntimeError("the pipeline's channel broke in a way nobody expected")
        started.wait()
        for _ in range(100):  # a healthy pipeline polls until it is told to stop (bounded: 10 s)
            if self.stopper.stopping:
                return 0
            threading.Event().wait(0.1)
        return 0

    monkeypatch.setattr(
        relay_module.OutboxRelay, "__init__", lambda self, batch_size, stopper: setattr(self, "stopper", stopper)
    )
    monkeypatch.setattr(relay_module.OutboxRelay, "run", run)
    stopper = Stopper()

    code = relay_module.run_pipelines(3, batch_size=None, stopper=stopper, once=False)

    assert code == 1
    assert stopper.stopping is True
