"""``make serve``'s web tier for tests: scripts/serve.py (nginx in front of gunicorn), DEBUG off.

And a raw HTTP/1.1 client: the hostile requests these tests send (control characters, a bad
``Content-Length``, a chunked body) are exactly what a client library would refuse or normalise.
"""

import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from faultlib.processes import ProcessGroup, child_pids, free_port, wait_until


@dataclass
class Tier:
    port: int
    proc: subprocess.Popen  # scripts/serve.py
    var_dir: Path

    def children(self) -> dict[str, int]:
        """``{"gunicorn": pid, "nginx": pid}``: the masters scripts/serve.py started."""
        found = {}
        for pid in child_pids(self.proc.pid):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            found["gunicorn" if b"gunicorn" in cmdline else "nginx"] = pid
        return found

    def access_log(self) -> list[str]:
        path = self.var_dir / "serve" / "log" / "nginx-access.log"
        return path.read_text().splitlines() if path.exists() else []


def var_dir(parent: Path | None = None) -> Path:
    """A new folder nginx's workers (``www-data`` when the master runs as root) may traverse.

    Not under pytest's own temporary folders: those are private to their user.
    """
    folder = Path(tempfile.mkdtemp(prefix="serve-test-", dir=parent))
    folder.chmod(0o755)
    return folder


def start_tier(group: ProcessGroup, root: Path, env: dict[str, str] | None = None) -> Tier:
    """Start scripts/serve.py as ``make serve`` does, on a free port of 127.0.0.1; once it answers.

    Its ``VAR_DIR`` is a new folder in ``root`` (from :func:`var_dir`).
    """
    port = free_port()
    folder = var_dir(root)
    proc = group.spawn(
        "serve",
        [sys.executable, "scripts/serve.py", "--host", "127.0.0.1", "--port", str(port)],
        env={
            "DEBUG": "0",
            "SECRET_KEY": secrets.token_urlsafe(40),
            "MESSAGING_ENCRYPTION_KEYS": settings.DEVELOPMENT_ENCRYPTION_KEYS,
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "VAR_DIR": str(folder),
            "WEB_CONCURRENCY": "2",
            "CHECKOUT_THROTTLE": "off",  # tests place many orders from one address (a test sets its own)
            **(env or {}),
        },
    )
    tier = Tier(port, proc, folder)
    healthz = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    wait_until(
        lambda: proc.poll() is not None or request(port, healthz).status == 200,
        timeout=90,
        interval=0.3,
        message="make serve's nginx to answer /healthz",
    )
    assert proc.poll() is None, group.logs()
    return tier


def stop_tier(tier: Tier) -> int:
    """SIGINT, as Ctrl-C sends; the exit code."""
    if tier.proc.poll() is None:
        tier.proc.send_signal(signal.SIGINT)
    return tier.proc.wait(timeout=60)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes
    closed_by_reset: bool = False


def request(port: int, raw: bytes, *, timeout: float = 10, source: str = "127.0.0.1") -> Reply:
    """Send ``raw`` (``Connection: close`` is added to the head) and read the answer to the end.

    ``source``: the client's own address, any of 127.0.0.0/8 (Linux answers them all on loopback).
    """
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if sep and b"\r\nconnection:" not in head.lower():
        raw = head + b"\r\nConnection: close" + sep + rest
    data, reset = b"", False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0)) as sock:
            sock.sendall(raw)
            while chunk := sock.recv(65536):
                data += chunk
    except ConnectionResetError:  # nginx resets a connection it answered before reading its body
        reset = True
    except OSError:
        return Reply(0, {}, data, reset)
    return parse(data, reset)


def parse(data: bytes, reset: bool = False) -> Reply:
    head, _, body = data.partition(b"\r\n\r\n")
    if not head:
        return Reply(0, {}, b"", reset)
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = unchunk(body)
    return Reply(int(lines[0].split()[1]), headers, body, reset)


def unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, body = out + body[:size], body[size + 2 :]
    return out


def access_status(line: str) -> int:
    """The status of one line of nginx's access log (its default ``combined`` format)."""
    return int(re.search(r'" (\d{3}) ', line).group(1))
