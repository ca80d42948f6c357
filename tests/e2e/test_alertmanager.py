"""deploy/alertmanager/ is valid for Alertmanager and routes every alert of alerts.yml by severity.

amtool comes from Debian's prometheus-alertmanager package (scripts/ensure_prometheus.py, which
``make test`` runs). Without it these tests fail; they never skip. The routing through a real
Prometheus and Alertmanager (inhibition, a dead letter reaching the webhook) is tested in
tests/e2e/test_prometheus_alerting.py.
"""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ALERTMANAGER = DEPLOY / "alertmanager" / "alertmanager.yml"
RECEIVER_OF_SEVERITY = {"critical": "shop-pager", "warning": "shop-tickets"}


def amtool(*args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("amtool")
    assert binary, "amtool is missing: run scripts/ensure_prometheus.py as root (installs prometheus-alertmanager)"
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)


def alert_rules() -> dict[str, dict]:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    return {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}


def test_amtool_accepts_the_configuration():
    result = amtool("check-config", str(ALERTMANAGER))
    assert result.returncode == 0, result.stdout + result.stderr
    assert " - 2 inhibit rules\n - 2 receivers\n" in result.stdout, result.stdout


def test_amtool_refuses_a_broken_configuration(tmp_path):
    broken = tmp_path / "alertmanager.yml"
    broken.write_text(ALERTMANAGER.read_text().replace("receiver: shop-pager", "receiver: nobody"))
    result = amtool("check-config", str(broken))
    assert result.returncode != 0
    assert 'undefined receiver "nobody"' in result.stdout + result.stderr


@pytest.mark.parametrize("name", sorted(alert_rules()))
def test_each_alert_reaches_the_receiver_of_its_severity(name):
    labels = {"alertname": name, **alert_rules()[name]["labels"]}
    expected = RECEIVER_OF_SEVERITY[labels["severity"]]
    args = [f"{key}={value}" for key, value in labels.items()]
    result = amtool("config", "routes", "test", f"--config.file={ALERTMANAGER}", *args)
    assert (result.returncode, result.stdout.strip()) == (0, expected), result.stderr


def test_a_target_down_silences_the_alerts_it_explains_and_no_others():
    """The first inhibition's ``equal: [service]``: the alerts labelled with a worker's service are
    the ones a stopped worker causes; the database-gauge alerts keep paging on their own. The
    second: no RabbitMQ majority explains the per-node warnings and the outbox's age, nothing else."""
    services = {name: rule["labels"].get("service") for name, rule in alert_rules().items()}
    assert services == {
        "OutboxOldestPendingTooOld": "shop-relay",
        "ScheduledMessagesOverdue": "shop-relay",
        "OutboxRowsParked": None,
        "DeadLettersWaiting": None,
        "ConsumerStalledQueueGrowing": "shop-consumers",
        "OrdersPendingPastSagaDeadline": "shop-deadline",
        "OrchestratedSagaStuck": "shop-consumers",  # the orchestrator's consumer runs there
        "GatewayCallsOverdue": None,  # the gateway worker has no scrape target to be down
        "GatewayCallsFailing": None,  # the gateway refuses or garbles: no stopped worker explains it
        "HandlerBreakerOpen": None,  # a handler's dependency fails; a stopped consumer reports nothing
        "ShopWorkerDown": None,  # from its job, by label_replace in the expression
        "ShopWebDown": None,
        "ShopDatabaseDown": None,
        "RabbitMQNodeDown": "rabbitmq",  # no shop worker's: a stopped worker never silences it
        "RabbitMQMajorityDown": "rabbitmq",
    }
    for source in ("ShopWorkerDown", "ShopWebDown"):
        assert "label_replace(up{job=" in alert_rules()[source]["expr"]
        assert '"service", "$1", "job", "(.+)")' in alert_rules()[source]["expr"]
    assert yaml.safe_load(ALERTMANAGER.read_text())["inhibit_rules"] == [
        {
            "source_matchers": ['alertname=~"ShopWorkerDown|ShopWebDown"'],
            "target_matchers": ['alertname!~"ShopWorkerDown|ShopWebDown"'],
            "equal": ["service"],
        },
        {
            "source_matchers": ['alertname="RabbitMQMajorityDown"'],
            "target_matchers": ['alertname=~"RabbitMQNodeDown|OutboxOldestPendingTooOld"'],
        },
    ]
