"""A real Prometheus evaluates deploy/prometheus/alerts.yml against the shop's own processes.

OutboxOldestPendingTooOld fires while the relay is stopped and checkouts pile up in the outbox,
and resolves once a relay runs again.

Prometheus is Debian's package (scripts/ensure_prometheus.py), on a free port of 127.0.0.1 with
a temporary config and storage. The config is deploy/prometheus/prometheus.yml with the test's
ports, 1 s intervals, and without the deadline-loop and RabbitMQ jobs (the test runs no deadline
loop, and the rabbitmq_prometheus plugin is node-wide, so the test does not enable it). The rules
are alerts.yml with every ``for:`` at 2 s, every ``keep_firing_for:`` at 20 s and the outbox-age
threshold at 3 s instead of 60 s, so the test takes seconds rather than minutes.
"""

import json
import re
import subprocess
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from reliable_messaging.models import DeadLetter, OutboxMessage

from faultlib.broker import publish_raw
from faultlib.fixtures import ALL_DATABASES
from faultlib.load import as_json, order_created_payload
from faultlib.processes import free_port, wait_until
from faultlib.saga import seed_catalog, wait_terminal
from faultlib.scenarios import FAST_RETRIES
from tests.support.locks import payment_row_held
from tests.support.monitoring import DEPLOY, Alertmanager, Daemons, Prometheus, WebhookReceiver, answers, http_json

ALERT = "OutboxOldestPendingTooOld"
FAST_FOR, FAST_AGE = "2s", 3
# Far longer than the relay takes from answering scrapes to publishing (its start-up, the broker's
# connection), then a scrape and an evaluation of the outbox's age (1 s each): the outbox alert
# resolves while ShopWorkerDown still holds it back, so it never pages alone.
FAST_KEEP_FIRING = "20s"


@pytest.fixture
def daemons(tmp_path):
    """Prometheus (and Alertmanager) of the test's own; always stopped afterwards."""
    started = Daemons(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def fast_rules(target: Path) -> dict:
    """alerts.yml with short durations; returns the rewritten outbox-age rule."""
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    outbox = None
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = FAST_FOR
            if "keep_firing_for" in rule:
                rule["keep_firing_for"] = FAST_KEEP_FIRING
            if rule["alert"] == ALERT:
                rule["expr"], replaced = re.subn(r"> 60$", f"> {FAST_AGE}", rule["expr"].strip())
                assert replaced == 1, rule["expr"]
                outbox = rule
    assert outbox is not None
    target.write_text(yaml.safe_dump(rules))
    return outbox


def write_config(
    target: Path, ports: dict[str, int], token_file: Path, rules_file: Path, alertmanager: Alertmanager | None = None
) -> None:
    """prometheus.yml with the test's ports and intervals, sending alerts to ``alertmanager`` (or nowhere)."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    if alertmanager is None:
        del config["alerting"]
    else:
        target_address = alertmanager.base.removeprefix("http://")
        config["alerting"]["alertmanagers"] = [{"static_configs": [{"targets": [target_address]}]}]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["shop-web"]["authorization"] = {"credentials_file": str(token_file)}
    for name, port in ports.items():
        jobs[name]["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(rules_file)]
    config["scrape_configs"] = [jobs[name] for name in ports]
    target.write_text(yaml.safe_dump(config))


def fast_routes(target: Path, receiver: WebhookReceiver) -> dict:
    """alertmanager.yml with its receivers' URLs on ``receiver`` (same paths) and second-long waits."""
    config = yaml.safe_load((DEPLOY / "alertmanager" / "alertmanager.yml").read_text())
    routes = [config["route"], *config["route"]["routes"]]
    for route in routes:
        route.update(group_wait="1s", group_interval="1s")
    for entry in config["receivers"]:
        for hook in entry["webhook_configs"]:
            hook["url"] = receiver.url + urllib.parse.urlsplit(hook["url"]).path
    target.write_text(yaml.safe_dump(config))
    return config


@pytest.fixture
def webhook():
    receiver = WebhookReceiver()
    yield receiver
    receiver.close()


@dataclass
class AlertingShop:
    web: str  # the web process's base URL
    ports: dict[str, int]  # scrape job -> the port it scrapes
    relay: subprocess.Popen
    prometheus: Prometheus
    alertmanager: Alertmanager
    outbox_rule: dict  # OutboxOldestPendingTooOld as this Prometheus evaluates it


@pytest.fixture
def alerting_shop(processes, quiet_broker, daemons, webhook, tmp_path) -> Callable[..., AlertingShop]:
    """Starts the shop (web, relay, consumers with ``consumer_env``), a real Alertmanager with the
    shipped routes, its webhooks pointed at ``webhook``, and a real Prometheus with the shipped
    rules scraping the shop, all fast; returns once every target is scraped (the web one with the
    token)."""

    def start(consumer_env: dict[str, str] | None = None) -> AlertingShop:
        ports = {"shop-web": free_port(), "shop-relay": free_port(), "shop-consumers": free_port()}
        token = uuid.uuid4().hex
        token_file = tmp_path / "metrics-token"
        token_file.write_text(token)
        address = f"127.0.0.1:{ports['shop-web']}"
        web = f"http://{address}"
        processes.start("web", "runserver", address, "--noreload", env={"METRICS_TOKEN": token})
        relay = processes.start("relay", "run_outbox_relay", "--metrics-port", str(ports["shop-relay"]))
        processes.start("consumers", "run_consumers", "--metrics-port", str(ports["shop-consumers"]), env=consumer_env)
        outbox_rule = fast_rules(tmp_path / "alerts.yml")
        fast_routes(tmp_path / "alertmanager.yml", webhook)
        alertmanager = daemons.alertmanager(tmp_path / "alertmanager.yml")
        write_config(tmp_path / "prometheus.yml", ports, token_file, tmp_path / "alerts.yml", alertmanager)
        prom = daemons.prometheus(tmp_path / "prometheus.yml")
        seed_catalog()
        wait_until(lambda: answers(f"{web}/healthz"), timeout=30, message="the web process")
        everything_up = {"shop-web": "up", "shop-relay": "up", "shop-consumers": "up"}
        wait_until(lambda: prom.target_health() == everything_up, timeout=30, message=f"targets {everything_up}")
        return AlertingShop(web, ports, relay, prom, alertmanager, outbox_rule)

    return start


def place_checkout(base: str, token: str = "tok_visa") -> str:
    status, order = http_json(
        f"{base}/api/checkout/",
        data=json.dumps(
            {"customer_id": "prom", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": token}
        ).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": str(uuid.uuid4())},
        timeout=10,
    )
    assert status == 201, order
    return order["id"]


def paged(webhook: WebhookReceiver, status: str = "firing") -> set[str]:
    """The names of the alerts the pager received with ``status`` (a re-notification counts once)."""
    return {a["labels"]["alertname"] for a in webhook.alerts("/page", status)}


def unpublished() -> int:
    return OutboxMessage.objects.filter(published_at__isnull=True).count()


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_outbox_age_alert_fires_while_the_relay_is_stopped_and_resolves_when_it_runs_again(
    processes, alerting_shop, webhook
):
    shop = alerting_shop()
    web, prom, alertmanager = shop.web, shop.prometheus, shop.alertmanager

    # Every target scraped (the fixture waited for that), the rule evaluated on real data: inactive.
    wait_until(lambda: unpublished() == 0, timeout=30, message="the catalogue's events to be published")
    age = f'messaging_outbox_oldest_pending_age_seconds{{job="shop-web"}} < {FAST_AGE}'
    wait_until(lambda: len(prom.api("query", query=age)["result"]) == 1, timeout=30, message="a young outbox")
    wait_until(lambda: prom.rule_state(ALERT) == ("inactive", "ok"), timeout=30, message=f"{ALERT} inactive")
    assert prom.active_alerts() == {}

    # The relay stops: its target goes down first, and Alertmanager pages for it.
    assert processes.stop(shop.relay) == 0
    wait_until(lambda: webhook.alerts("/page"), timeout=30, interval=0.5, message="the pager to receive an alert")
    assert paged(webhook) == {"ShopWorkerDown"}
    down = webhook.alerts("/page")[0]
    assert (down["labels"]["job"], down["labels"]["service"], down["labels"]["severity"]) == (
        "shop-relay",
        "shop-relay",
        "critical",
    )

    # Checkouts pile up in the outbox: the outbox alert fires too, but the relay being down
    # explains it, so Alertmanager holds it back (inhibited) instead of paging twice.
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
    assert alert["labels"] == {"alertname": ALERT, "severity": "critical", "service": "shop-relay"}
    assert alert["annotations"]["runbook"] == shop.outbox_rule["annotations"]["runbook"]
    assert float(alert["value"]) > FAST_AGE
    assert unpublished() == 3  # still piling up: nothing published them

    def outbox_alert_status() -> dict | None:
        held = [a["status"] for a in alertmanager.alerts() if a["labels"]["alertname"] == ALERT]
        return held[0] if held else None

    wait_until(lambda: outbox_alert_status() is not None, timeout=30, interval=0.5, message=f"{ALERT} at Alertmanager")
    status = outbox_alert_status()
    assert status["state"] == "suppressed" and len(status["inhibitedBy"]) == 1, status
    assert paged(webhook) == {"ShopWorkerDown"}
    assert webhook.notifications("/ticket") == []

    processes.start("relay", "run_outbox_relay", "--metrics-port", str(shop.ports["shop-relay"]))
    wait_until(lambda: (ALERT, None) not in prom.active_alerts(), timeout=30, interval=0.5, message=f"{ALERT} resolved")
    assert ("ShopWorkerDown", "shop-relay") in prom.active_alerts()  # kept firing: still holding it back
    wait_until(lambda: prom.active_alerts() == {}, timeout=60, interval=0.5, message="every alert to resolve")
    assert prom.rule_state(ALERT) == ("inactive", "ok")
    wait_terminal(orders)
    assert unpublished() == 0
    wait_until(
        lambda: paged(webhook, "resolved") == {"ShopWorkerDown"},
        timeout=60,
        interval=0.5,
        message="the pager to hear that ShopWorkerDown resolved",
    )
    assert ALERT not in paged(webhook)


@pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)
def test_a_dead_letter_reaches_the_on_call_webhook_with_its_reason(alerting_shop, webhook):
    # given the shop, a real Prometheus with the shipped rules and a real Alertmanager with the
    # shipped routes, its webhooks pointed at this test
    alerting_shop(consumer_env={**FAST_RETRIES, "WORKER_LOCK_TIMEOUT": "0.5"})

    # when an order's payment keeps failing (another session holds its payment row) until its
    # retries are exhausted, and the message becomes a dead letter
    order_id = str(uuid.uuid4())
    with payment_row_held(order_id):
        publish_raw(
            "orders.order.created",
            as_json(order_created_payload(order_id)),
            properties={"message_id": str(uuid.uuid4()), "correlation_id": order_id},
            headers={"event_type": "orders.order.created", "schema_version": 1},
        )
        wait_until(
            lambda: DeadLetter.objects.filter(correlation_id=order_id).exists(), timeout=60, message="a dead letter"
        )
    letter = DeadLetter.objects.get(correlation_id=order_id)
    assert (letter.consumer, letter.replayed_at) == ("payments", None)

    # then the tickets webhook (a warning) receives DeadLettersWaiting with the reason (no order id:
    # metrics carry none; dead_letters list names it)
    wait_until(lambda: webhook.alerts("/ticket"), timeout=60, interval=0.5, message="a notification at /ticket")
    assert {a["labels"]["alertname"] for a in webhook.alerts("/ticket")} == {"DeadLettersWaiting"}
    alert = webhook.alerts("/ticket")[-1]
    assert alert["labels"] == {"alertname": "DeadLettersWaiting", "consumer": "payments", "severity": "warning"}
    assert alert["annotations"]["summary"] == "1 dead letter(s) of consumer payments wait for an operator."
    oldest = alert["annotations"]["oldest"]
    assert oldest.startswith(f"reason {letter.reason}, waiting "), oldest
    assert webhook.notifications("/page") == []  # a dead letter waits safely: a ticket, not a page


def rabbitmq_alert(name: str, **labels: str) -> dict:
    """An alert as deploy/prometheus/alerts.yml labels it (its promtool tests pin those labels)."""
    rule = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    [rule] = [r for g in rule["groups"] for r in g["rules"] if r["alert"] == name]
    return {"labels": {"alertname": name, **rule["labels"], **labels}}


def test_no_rabbitmq_majority_pages_once_while_one_node_down_is_a_ticket(daemons, webhook, tmp_path):
    # given the shipped routes and inhibitions on a real Alertmanager, its webhooks on this test
    fast_routes(tmp_path / "alertmanager.yml", webhook)
    alertmanager = daemons.alertmanager(tmp_path / "alertmanager.yml")

    def states() -> dict[str, tuple[str, int]]:
        return {
            a["labels"]["alertname"] + a["labels"].get("instance", ""): (
                a["status"]["state"],
                len(a["status"]["inhibitedBy"]),
            )
            for a in alertmanager.alerts()
        }

    # when one node of three stops answering: a ticket, no page
    first = rabbitmq_alert("RabbitMQNodeDown", job="rabbitmq", instance="10.0.0.1:15692")
    alertmanager.post_alerts([first])
    wait_until(lambda: webhook.alerts("/ticket"), timeout=30, interval=0.5, message="a ticket for the node")
    assert [a["labels"]["instance"] for a in webhook.alerts("/ticket")] == ["10.0.0.1:15692"]
    assert webhook.notifications("/page") == []

    # when a second node goes, and the outbox ages because the relay has nowhere to publish
    second = rabbitmq_alert("RabbitMQNodeDown", job="rabbitmq", instance="10.0.0.2:15692")
    majority = rabbitmq_alert("RabbitMQMajorityDown")
    outbox = {"labels": {"alertname": ALERT, "severity": "critical", "service": "shop-relay"}}
    alertmanager.post_alerts([first, second, majority, outbox])

    # then the pager hears of the majority only; the node warnings and the outbox's age are held back by it
    wait_until(lambda: paged(webhook), timeout=30, interval=0.5, message="a page")
    assert states() == {
        "RabbitMQMajorityDown": ("active", 0),
        "RabbitMQNodeDown10.0.0.1:15692": ("suppressed", 1),
        "RabbitMQNodeDown10.0.0.2:15692": ("suppressed", 1),
        ALERT: ("suppressed", 1),
    }
    assert paged(webhook) == {"RabbitMQMajorityDown"}
    assert [a["labels"]["instance"] for a in webhook.alerts("/ticket")] == ["10.0.0.1:15692"]
