"""Real processes for end-to-end and crash tests: start ``manage.py`` commands, stop or kill them, find what
they started (``make bench`` and ``make soak`` wait and read the process tree with these too)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

BASE_DIR = Path(__file__).resolve().parents[1]


def database_url() -> str:
    """The URL of the test database, for processes started by a test or a chaos scenario."""
    s = connection.settings_dict
    return f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def process_environment(database: str, **extra: str) -> dict[str, str]:
    """The environment of the processes a test or a chaos scenario starts, on ``database``; their fake
    gateway on a port of its own (``ProcessGroup`` starts it with the first consumer)."""
    port = extra.pop("GATEWAY_PORT", None) or str(free_port())
    return {
        **os.environ,
        "DATABASE_URL": database,
        "GATEWAY_DATABASE_URL": database,
        "GATEWAY_PORT": port,
        "GATEWAY_URL": f"http://127.0.0.1:{port}",
        "DEBUG": "1",
        "RELAY_POLL_INTERVAL": "0.2",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


GATEWAY_COMMAND = "run_fake_gateway"
GATEWAY_CALLS_COMMAND = "run_gateway_calls"


class ProcessGroup:
    """Processes started by one test; whatever is still alive at the end is killed. The first consumer
    started brings the fake gateway's HTTP service up first (on the group's ``GATEWAY_PORT``), unless
    the group runs one already (a Procfile's ``gateway``) or its ``GATEWAY_URL`` is elsewhere, and
    payments' gateway worker (the Procfile's ``gateway-calls``) unless one is running."""

    def __init__(self, log_dir: Path, env: dict[str, str]):
        self.log_dir = log_dir
        self.env = env
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []
        self.gateway: subprocess.Popen | None = None
        self.gateway_calls: subprocess.Popen | None = None
        self.signalled: set[int] = set()  # pids this group stopped or killed: the others ended on their own

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``manage.py <args>``."""
        if args and args[0] == GATEWAY_COMMAND:
            return self.start_gateway(name, *args, env=env)
        if args and args[0] == "run_consumers":
            self.ensure_gateway(env)
            self.ensure_gateway_calls(env)
        proc = self.spawn(name, [sys.executable, "manage.py", *args], env=env)
        if args and args[0] == GATEWAY_CALLS_COMMAND:
            self.gateway_calls = proc
        return proc

    def start_gateway(
        self, name: str = "gateway", *args: str, env: dict[str, str] | None = None, cwd: Path = BASE_DIR
    ) -> subprocess.Popen:
        """Start the fake gateway and wait until it answers."""
        merged = {**self.env, **(env or {})}
        argv = [sys.executable, "manage.py", *(args or (GATEWAY_COMMAND,))]
        self.gateway = self.spawn(name, argv, env=env, cwd=cwd)
        port = int(merged.get("GATEWAY_PORT") or 8090)
        wait_until(lambda: listening(port) or self.gateway.poll() is not None, timeout=60, message="the gateway")
        if self.gateway.poll() is not None:
            raise RuntimeError(f"the fake gateway exited with {self.gateway.returncode}:\n{self.logs()}")
        return self.gateway

    def ensure_gateway(self, env: dict[str, str] | None = None, cwd: Path = BASE_DIR) -> None:
        """The fake gateway this group's payments consumers reach, started if it is not running; a
        group whose environment names no gateway gets one on a free port (every later process too)."""
        if self.gateway is not None and self.gateway.poll() is None:
            return
        merged = {**self.env, **(env or {})}
        if merged.get("CONTEXTS") and "payments" not in merged["CONTEXTS"].split(","):
            return  # a deployment without payments calls no gateway (and cannot run it)
        if not merged.get("GATEWAY_PORT") and not merged.get("GATEWAY_URL"):
            port = str(free_port())
            self.env.update(GATEWAY_PORT=port, GATEWAY_URL=f"http://127.0.0.1:{port}")
            merged.update(GATEWAY_PORT=port, GATEWAY_URL=f"http://127.0.0.1:{port}")
            if env is not None:
                env.update(GATEWAY_PORT=port, GATEWAY_URL=f"http://127.0.0.1:{port}")
        port = merged.get("GATEWAY_PORT")
        if not port or merged.get("GATEWAY_URL", f"http://127.0.0.1:{port}") != f"http://127.0.0.1:{port}":
            return  # a gateway elsewhere (or the in-process stand-in): not this group's to start
        self.start_gateway(env=env, cwd=cwd)

    def ensure_gateway_calls(
        self,
        env: dict[str, str] | None = None,
        cwd: Path = BASE_DIR,
        name: str = "gateway-calls",
        python: str = sys.executable,
    ) -> None:
        """Payments' gateway worker, started if none is running: without it an order's charge stays
        in flight. Not in a deployment without payments, nor in a tree from before the worker."""
        if self.gateway_calls is not None and self.gateway_calls.poll() is None:
            return
        merged = {**self.env, **(env or {})}
        if merged.get("CONTEXTS") and "payments" not in merged["CONTEXTS"].split(","):
            return
        if not (cwd / "payments" / "gateway_calls.py").exists():
            return
        self.gateway_calls = self.spawn(name, [python, "manage.py", GATEWAY_CALLS_COMMAND], env=env, cwd=cwd)

    def spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path = BASE_DIR
    ) -> subprocess.Popen:
        log = self.log_dir / f"{name}-{len(self.procs)}.log"
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**self.env, **(env or {})},
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append((name, proc, log))
        return proc

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        if args and args[0] == "run_consumers":
            self.ensure_gateway(env)
            self.ensure_gateway_calls(env)
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=BASE_DIR,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stop(self, proc: subprocess.Popen, timeout: float = 30) -> int:
        """SIGTERM, and the exit code once it has finished what it had in hand."""
        if proc.poll() is None:
            self.signalled.add(proc.pid)
            proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=timeout)

    def kill(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            self.signalled.add(proc.pid)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for _, proc, _ in self.procs:
            if proc.poll() is None:
                self.signalled.add(proc.pid)
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for _, proc, _ in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(proc)

    def kill_all(self) -> None:
        for _, proc, _ in self.procs:
            try:
                self.kill(proc)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass

    def log_lines(self, proc: subprocess.Popen) -> list[dict]:
        """The JSON lines (``LOG_FORMAT=json``) ``proc`` has logged so far."""
        log = next(log for _, p, log in self.procs if p is proc)
        return [json.loads(line) for line in log.read_text(errors="replace").splitlines() if line.startswith('{"')]

    def logs(self, tail: int = 40) -> str:
        """Each process's last ``tail`` lines, under a header that says how it ended: a process that
        exited on its own (even with 0) is told apart from one this group stopped."""
        parts = []
        for name, proc, log in self.procs:
            lines = log.read_text(errors="replace").splitlines() if log.exists() else []
            parts.append(f"--- {name} (pid {proc.pid}, {self.ending(proc)}) ---\n" + "\n".join(lines[-tail:]))
        return "\n".join(parts)

    def ending(self, proc: subprocess.Popen) -> str:
        code = proc.poll()
        if code is None:
            return "running"
        how = "stopped by the group" if proc.pid in self.signalled else "ended before the group stopped it"
        return f"exit {code}, {how}"


def wait_until(predicate, *, timeout: float, interval: float = 0.1, message: str = "condition", seen=None) -> None:
    """Poll ``predicate`` until it is true; ``TimeoutError`` after ``timeout`` seconds (the tests,
    ``make chaos`` and ``make bench`` all wait this way), with what ``seen()`` returns then, if given:
    what a reader of the failure needs to tell which part stalled."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {message}" + (f"; seen: {seen()}" if seen else ""))


def listening(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


_ports_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, and that this process has not
    handed out before: a test picks several ports before the processes it gives them to bind them,
    and the kernel may offer a picked port again meanwhile (a relay then stops: its port taken)."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _ports_handed_out:
            _ports_handed_out.add(port)
            return port
    raise RuntimeError(f"no free port in 100 tries ({len(_ports_handed_out)} handed out already)")


def _stat_fields(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` after the command name (which may hold spaces and parentheses)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is ``pid``, right now."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int(_stat_fields(int(entry.name))[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):  # ended meanwhile
                continue
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``: its children, theirs, and so on."""
    found, todo = [], child_pids(pid)
    while todo:
        found.append(todo.pop())
        todo += child_pids(found[-1])
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: it exists and is not a zombie waiting for its parent."""
    try:
        return _stat_fields(pid)[0] != "Z"
    except OSError:
        return False


def procfile_commands(path: Path = BASE_DIR / "Procfile", *, skip: tuple[str, ...] = ("web",)) -> dict[str, list[str]]:
    """The ``manage.py`` arguments of each Procfile line, as ``make run`` starts them, less the
    ``--metrics-port`` each takes (a test's processes must not compete for fixed ports)."""
    commands = {}
    for line in path.read_text().splitlines():
        name, sep, command = line.partition(":")
        if line.startswith("#") or not sep or name in skip:
            continue
        words = command.split("manage.py", 1)[1].split()
        if "--metrics-port" in words:
            at = words.index("--metrics-port")
            del words[at : at + 2]
        commands[name] = words
    return commands
