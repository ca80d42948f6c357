"""Real Prometheus and Alertmanager for the alerting tests, and a webhook receiver to page.

Both come from Debian's packages (scripts/ensure_prometheus.py, which ``make test`` runs); each is
started on a free port of 127.0.0.1 with the test's own configuration and storage, and always
stopped afterwards. Alertmanager's gossip port is switched off (``--cluster.listen-address=``), so
nothing listens on its default ports 9093/9094.
"""

import json
import shutil
import signal
import subprocess
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from faultlib.processes import free_port, wait_until

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def http_json(url: str, data: bytes | None = None, headers: dict | None = None, timeout: float = 5):
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
        return response.status, json.loads(body) if body else None


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


class Prometheus:
    def __init__(self, base: str):
        self.base = base

    def api(self, path: str, **params) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = http_json(f"{self.base}/api/v1/{path}{query}")
        assert (status, body["status"]) == (200, "success"), body
        return body["data"]

    def target_health(self) -> dict[str, str]:
        return {t["labels"]["job"]: t["health"] for t in self.api("targets", state="active")["activeTargets"]}

    def active_alerts(self) -> dict[tuple[str, str | None], dict]:
        """Pending and firing alerts by (alertname, job); resolved ones are not listed."""
        return {(a["labels"]["alertname"], a["labels"].get("job")): a for a in self.api("alerts")["alerts"]}

    def rule_state(self, name: str) -> tuple[str, str]:
        rules = [r for g in self.api("rules", type="alert")["groups"] for r in g["rules"] if r["name"] == name]
        assert len(rules) == 1, rules
        return rules[0]["state"], rules[0]["health"]


class Alertmanager:
    def __init__(self, base: str):
        self.base = base

    def alerts(self) -> list[dict]:
        """Every alert it holds, with its status (``active`` or ``suppressed`` and by what)."""
        return http_json(f"{self.base}/api/v2/alerts")[1]

    def post_alerts(self, alerts: list[dict]) -> None:
        """Send alerts as Prometheus does (labels, annotations)."""
        status, _ = http_json(
            f"{self.base}/api/v2/alerts", data=json.dumps(alerts).encode(), headers={"Content-Type": "application/json"}
        )
        assert status == 200


class Daemons:
    """Starts Prometheus and Alertmanager for one test; ``stop_all`` ends them and prints their logs."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.started: list[tuple[str, subprocess.Popen, Path]] = []

    def _start(self, binary: str, config: Path, storage_flag: str, *flags: str) -> str:
        """Starts Debian's ``binary`` on a free port with ``config`` and storage of its own; returns its base URL."""
        path = shutil.which(binary)
        assert path, f"{binary} is missing: run scripts/ensure_prometheus.py as root"
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        storage = self.folder / f"{binary}-storage-{len(self.started)}"
        argv = [path, f"--config.file={config}", f"{storage_flag}={storage}", f"--web.listen-address=127.0.0.1:{port}"]
        log = self.folder / f"{binary}-{len(self.started)}.log"
        proc = subprocess.Popen(
            [*argv, *flags, "--log.level=warn"], stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
        )
        self.started.append((binary, proc, log))
        wait_until(lambda: proc.poll() is not None or answers(f"{base}/-/ready"), timeout=30, message=binary)
        assert proc.poll() is None, log.read_text(errors="replace")
        return base

    def prometheus(self, config: Path) -> Prometheus:
        return Prometheus(self._start("prometheus", config, "--storage.tsdb.path"))

    def alertmanager(self, config: Path) -> Alertmanager:
        # No gossip port: nothing listens on Alertmanager's default ports.
        no_gossip = "--cluster.listen-address="
        return Alertmanager(self._start("prometheus-alertmanager", config, "--storage.path", no_gossip))

    def stop_all(self) -> None:
        for name, proc, log in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            # The last lines, each cut short: Alertmanager logs its API's routes at start-up in lines
            # of kilobytes, which would crowd every other process's log out of a failure's excerpt.
            tail = "\n".join(line[:300] for line in log.read_text(errors="replace").splitlines()[-30:])
            print(f"--- {name} (exit {proc.returncode}) ---\n{tail}")


class WebhookReceiver:
    """An HTTP server that records what Alertmanager posts to it, by path (e.g. /page, /ticket)."""

    def __init__(self):
        self.received: list[tuple[str, dict]] = []
        lock = threading.Lock()
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                with lock:
                    received.append((self.path, body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def notifications(self, path: str) -> list[dict]:
        return [body for p, body in list(self.received) if p == path]

    def alerts(self, path: str, status: str = "firing") -> list[dict]:
        """Every alert posted to ``path`` with ``status``, across notifications."""
        return [a for body in self.notifications(path) for a in body["alerts"] if a["status"] == status]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
