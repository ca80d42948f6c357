"""deploy/prometheus/ is valid for Prometheus, and every alert has a runbook and promtool unit tests.

promtool comes from Debian's prometheus package (scripts/ensure_prometheus.py, which ``make test``
runs). Without it these tests fail; they never skip.
"""

import re
import shutil
import subprocess
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
CONFIG, ALERTS, ALERTS_TEST = DEPLOY / "prometheus.yml", DEPLOY / "alerts.yml", DEPLOY / "alerts_test.yml"
TOKEN_FILE = "/etc/prometheus/shop-metrics-token"


def promtool(*args: str, cwd: Path = DEPLOY) -> str:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: run scripts/ensure_prometheus.py as root (apt-get install prometheus)"
    result = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"promtool {' '.join(args)} exited {result.returncode}:\n{output}"
    return output


def alert_rules() -> dict[str, dict]:
    rules = [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]
    named = {rule["alert"]: rule for rule in rules}
    assert len(named) == len(rules), "two alerts share a name"
    return named


def test_promtool_checks_the_rules():
    output = promtool("check", "rules", ALERTS.name)
    assert f"SUCCESS: {len(alert_rules())} rules found" in output, output


def test_promtool_checks_the_configuration_and_its_rule_files(tmp_path):
    # As shipped (no METRICS_TOKEN), and with the token's two lines uncommented: promtool insists
    # that the credentials_file exists, so that copy points at a temporary one.
    text = CONFIG.read_text()
    commented = f"    # authorization:\n    #   credentials_file: {TOKEN_FILE}\n"
    assert text.count(commented) == 1
    token = tmp_path / "shop-metrics-token"
    token.write_text("a-token\n")
    with_token = text.replace(commented, f"    authorization:\n      credentials_file: {token}\n")
    (tmp_path / "with-token").mkdir()
    (tmp_path / "with-token" / "prometheus.yml").write_text(with_token)
    shutil.copy(ALERTS, tmp_path / "with-token" / ALERTS.name)
    output = promtool("check", "config", "prometheus.yml", cwd=tmp_path / "with-token")
    assert "SUCCESS" in output, output
    (tmp_path / "prometheus.yml").write_text(text)
    shutil.copy(ALERTS, tmp_path / ALERTS.name)

    output = promtool("check", "config", "prometheus.yml", cwd=tmp_path)

    assert "SUCCESS: prometheus.yml is valid prometheus config file syntax" in output, output
    assert f"SUCCESS: {len(alert_rules())} rules found" in output, output


def test_promtool_unit_tests_of_every_alert_pass():
    output = promtool("test", "rules", ALERTS_TEST.name)
    assert "SUCCESS" in output, output


def test_every_alert_has_a_severity_a_summary_a_one_line_runbook_and_tests_that_fire_and_do_not_fire():
    alerts = alert_rules()
    cases = [
        case for test in yaml.safe_load(ALERTS_TEST.read_text())["tests"] for case in test.get("alert_rule_test", [])
    ]
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}

    assert "OutboxOldestPendingTooOld" in alerts
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        # "oldest" (DeadLettersWaiting): why its oldest dead letter waits, and for how long.
        assert {"summary", "runbook"} <= set(rule["annotations"]) <= {"summary", "runbook", "oldest"}, name
        assert rule["annotations"]["summary"].strip(), name
        runbook = rule["annotations"]["runbook"]
        assert "\n" not in runbook.strip(), f"{name}: the runbook is one line"
        assert re.search(r"python manage\.py \w|/admin/|rabbitmqctl |gunicorn |curl |pg_isready ", runbook), name
    # promtool passes a test of an alert name that does not exist: catch misspelt names here.
    assert (firing | quiet) - alerts.keys() == set()
    assert alerts.keys() - firing == set(), "alerts without a unit test that fires them"
    assert alerts.keys() - quiet == set(), "alerts without a unit test where they must not fire"


def test_the_alerts_job_names_and_the_scrape_targets_agree_with_the_processes():
    config = yaml.safe_load(CONFIG.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {name: [t for sc in job["static_configs"] for t in sc["targets"]] for name, job in jobs.items()}

    assert config["rule_files"] == ["alerts.yml"]
    assert config["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:9093"]}]}]}
    assert targets == {
        "shop-web": ["127.0.0.1:8000"],
        "shop-relay": ["127.0.0.1:9101"],
        "shop-consumers": ["127.0.0.1:9102", "127.0.0.1:9104"],
        "shop-deadline": ["127.0.0.1:9103"],
        "rabbitmq": ["127.0.0.1:15692"],
        "rabbitmq-queues": ["127.0.0.1:15692"],
    }
    assert "authorization" not in jobs["shop-web"]  # METRICS_TOKEN is off by default
    queues = jobs["rabbitmq-queues"]
    assert (queues["metrics_path"], queues["params"]) == (
        "/metrics/detailed",
        {"vhost": ["/"], "family": ["queue_coarse_metrics"]},
    )
    # Every job an alert names is scraped under that name.
    named = set()
    for rule in alert_rules().values():
        for matcher in re.findall(r'job=~?"([^"]+)"', rule["expr"]):
            named.update(matcher.split("|"))
    assert named == {"shop-web", "shop-relay", "shop-consumers", "shop-deadline", "rabbitmq"}
    assert named <= jobs.keys()
