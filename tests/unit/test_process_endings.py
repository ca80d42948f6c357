"""faultlib's ProcessGroup.logs(): a failure's excerpt says how each process ended, so a process
that exited on its own with 0 is not mistaken for one the group stopped at teardown."""

import os
import sys

from faultlib.processes import ProcessGroup, wait_until


def test_the_logs_tell_a_process_that_ended_on_its_own_from_one_the_group_stopped(tmp_path):
    group = ProcessGroup(tmp_path, dict(os.environ))
    quitter = group.spawn("quitter", [sys.executable, "-c", "print('done, leaving')"])
    sleeper = group.spawn("sleeper", [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"])
    wait_until(lambda: quitter.poll() is not None, timeout=30, message="the quitter to exit")
    wait_until(lambda: "up" in (tmp_path / "sleeper-1.log").read_text(), timeout=30, message="the sleeper up")

    running = group.logs()
    group.stop_all()
    ended = group.logs()

    assert f"--- quitter (pid {quitter.pid}, exit 0, ended before the group stopped it) ---\ndone, leaving" in ended
    assert f"--- sleeper (pid {sleeper.pid}, running) ---\nup" in running
    assert f"--- sleeper (pid {sleeper.pid}, exit -15, stopped by the group) ---\nup" in ended
