"""A real Prometheus evaluates deploy/prometheus/alerts.yml against the shop's own processes.

OutboxOldestPendingTooOld fires while the relay is stopped and checkouts pile up in the outbox,
and resolves once a relay runs again.

Prometheus is Debian's package (scripts/ensure_prometheus.py), on a free port of 127.0.0.1 with
a temporary config and storage. The config is deploy/prometheus/prometheus.yml with the test's
ports, 1 s intervals, and without the deadline-loop and RabbitMQ jobs (the test runs no deadline
loop, and the rabbitmq_prometheus plugin is node-wide, so the test does not enable it). The rules
are alerts.yml with every ``for:`` at 2 s and the outbox-age threshold at 3 s instead of 60 s, so
the test takes seconds rather than minutes.
"""

import json
import re
import shutil
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from faultlib.processes import free_port, wait_until
from faultlib.saga import seed_catalog, wait_terminal
from messaging.models import OutboxMessage
from tests.conftest import ALL_DATABASES

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
ALERT = "OutboxOldestPendingTooOld"
FAST_FOR, FAST_AGE = "2s", 3


def http_json(url: str, data: bytes | None = None, headers: dict | None = None, timeout: float = 5):
    request = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data else "GET")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, json.load(response)


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


@pytest.fixture
def prometheus(tmp_path):
    """Start Debian's prometheus on a free port with a given config; always stopped afterwards."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: run scripts/ensure_prometheus.py as root (apt-get install prometheus)"
    started: list[tuple[subprocess.Popen, Path]] = []

    def start(config: Path) -> Prometheus:
        port = free_port()
        log = tmp_path / "prometheus.log"
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        started.append((proc, log))
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: proc.poll() is not None or answers(f"{base}/-/ready"), timeout=30, message="prometheus")
        assert proc.poll() is None, log.read_text(errors="replace")
        return Prometheus(base)

    try:
        yield start
    finally:
        for proc, log in started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
            print(f"--- prometheus (exit {proc.returncode}) ---\n{log.read_text(errors='replace')[-4000:]}")


def fast_rules(target: Path) -> dict:
    """alerts.yml with short durations; returns the rewritten outbox-age rule."""
    rules = yaml.safe_load((DEPLOY / "alerts.yml").read_text())
    outbox = None
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = FAST_FOR
            if rule["alert"] == ALERT:
                rule["expr"], replaced = re.subn(r"> 60$", f"> {FAST_AGE}", rule["expr"].strip())
                assert replaced == 1, rule["expr"]
                outbox = rule
    assert outbox is not None
    target.write_text(yaml.safe_dump(rules))
    return outbox


def write_config(target: Path, ports: dict[str, int], token_file: Path, rules_file: Path) -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["shop-web"]["authorization"] = {"credentials_file": str(token_file)}
    for name, port in ports.items():
        jobs[name]["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(rules_file)]
    config["scrape_configs"] = [jobs[name] for name in ports]
    target.write_text(yaml.safe_dump(config))


def place_checkout(base: str) -> str:
    status, order = http_json(
        f"{base}/api/checkout/",
        data=json.dumps(
            {"customer_id": "prom", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": "tok_visa"}
        ).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": str(uuid.uuid4())},
        timeout=10,
    )
    assert status == 201, order
    return order["id"]


def unpublished() -> int:
    return OutboxMessage.objects.filter(published_at__isnull=True).count()


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_outbox_age_alert_fires_while_the_relay_is_stopped_and_resolves_when_it_runs_again(
    processes, prometheus, tmp_path
):
    ports = {"shop-web": free_port(), "shop-relay": free_port(), "shop-consumers": free_port()}
    token = uuid.uuid4().hex
    token_file = tmp_path / "metrics-token"
    token_file.write_text(token)
    web = f"http://127.0.0.1:{ports['shop-web']}"
    processes.start("web", "runserver", f"127.0.0.1:{ports['shop-web']}", "--noreload", env={"METRICS_TOKEN": token})
    relay = processes.start("relay", "run_outbox_relay", "--metrics-port", str(ports["shop-relay"]))
    processes.start("consumers", "run_consumers", "--metrics-port", str(ports["shop-consumers"]))
    outbox_rule = fast_rules(tmp_path / "alerts.yml")
    write_config(tmp_path / "prometheus.yml", ports, token_file, tmp_path / "alerts.yml")
    prom = prometheus(tmp_path / "prometheus.yml")
    seed_catalog()
    wait_until(lambda: answers(f"{web}/healthz"), timeout=30, message="the web process")

    # Every target scraped (the web one with the token), the rule evaluated on real data: inactive.
    everything_up = {"shop-web": "up", "shop-relay": "up", "shop-consumers": "up"}
    wait_until(lambda: prom.target_health() == everything_up, timeout=30, message=f"targets {everything_up}")
    wait_until(lambda: unpublished() == 0, timeout=30, message="the catalogue's events to be published")
    age = f'messaging_outbox_oldest_pending_age_seconds{{job="shop-web"}} < {FAST_AGE}'
    wait_until(lambda: len(prom.api("query", query=age)["result"]) == 1, timeout=30, message="a young outbox")
    wait_until(lambda: prom.rule_state(ALERT) == ("inactive", "ok"), timeout=30, message=f"{ALERT} inactive")
    assert prom.active_alerts() == {}

    assert processes.stop(relay) == 0
    orders = [place_checkout(web) for _ in range(3)]
    assert unpublished() == 3

    wanted = {(ALERT, None), ("ShopWorkerDown", "shop-relay")}
    wait_until(
        lambda: {key for key, a in prom.active_alerts().items() if a["state"] == "firing"} == wanted,
        timeout=30,
        interval=0.5,
        message=f"exactly {sorted(wanted, key=str)} firing",
    )
    alert = prom.active_alerts()[(ALERT, None)]
    assert alert["labels"] == {"alertname": ALERT, "severity": "critical"}
    assert alert["annotations"]["runbook"] == outbox_rule["annotations"]["runbook"]
    assert float(alert["value"]) > FAST_AGE
    assert unpublished() == 3  # still piling up: nothing published them

    processes.start("relay", "run_outbox_relay", "--metrics-port", str(ports["shop-relay"]))
    wait_until(lambda: prom.active_alerts() == {}, timeout=30, interval=0.5, message="every alert to resolve")
    assert prom.rule_state(ALERT) == ("inactive", "ok")
    wait_terminal(orders)
    assert unpublished() == 0
