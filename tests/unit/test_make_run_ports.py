"""`make run`'s workers take their metrics ports from PORT (two runs on other PORTs do not clash);
each variable, set, wins. `make -n` prints the banner's line with what honcho's processes get."""

import os
import subprocess

from django.conf import settings

VARIABLES = (
    "RELAY_METRICS_PORT",
    "CONSUMERS_METRICS_PORT",
    "DEADLINE_METRICS_PORT",
    "ORDERS_CONSUMERS_METRICS_PORT",
    "GATEWAY_PORT",
)


def metrics_line(*make_args: str, banner: str = "Metrics:", **env: str) -> str:
    clean = {key: value for key, value in os.environ.items() if key not in (*VARIABLES, "PORT", "MAKEFLAGS")}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "run", *make_args],
        cwd=settings.BASE_DIR,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if banner in line]
    return line


def test_the_default_port_keeps_the_ports_prometheus_scrapes():
    assert metrics_line() == (
        'echo "  Metrics: /metrics on the web port; relay :9101, consumers :9102 and :9104 (orders, events), '
        'deadline loop :9103"'
    )


def test_another_port_moves_every_metrics_port_with_it():
    expected = (
        'echo "  Metrics: /metrics on the web port; relay :9181, consumers :9182 and :9184 (orders, events), '
        'deadline loop :9183"'
    )
    assert metrics_line("PORT=8080") == expected
    assert metrics_line(PORT="8080") == expected


def test_a_variable_that_is_set_wins():
    assert metrics_line("PORT=8080", RELAY_METRICS_PORT="7001", DEADLINE_METRICS_PORT="7003") == (
        'echo "  Metrics: /metrics on the web port; relay :7001, consumers :9182 and :9184 (orders, events), '
        'deadline loop :7003"'
    )


def test_the_fake_gateways_port_follows_port_too():
    assert metrics_line(banner="Gateway:").endswith(':8090/ (GATEWAY_PORT)"')
    assert metrics_line("PORT=8080", banner="Gateway:").endswith(':8170/ (GATEWAY_PORT)"')
    assert metrics_line("PORT=8080", banner="Gateway:", GATEWAY_PORT="9999").endswith(':9999/ (GATEWAY_PORT)"')
