"""Health probes and the secure defaults around them."""

import json
import os
import secrets
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.test import Client

from faultlib.processes import BASE_DIR, database_url

pytestmark = pytest.mark.django_db

CLOSED_PORT_BROKER = "amqp://guest:guest@127.0.0.1:1//"
CLOSED_PORT_DATABASE = "postgres://postgres@127.0.0.1:1/shop"


def production_env(**overrides) -> dict[str, str]:
    """DEBUG off, as deployed: the secrets have to come from the environment."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "GATEWAY_DATABASE_URL": database_url(),
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "MESSAGING_ENCRYPTION_KEYS": settings.DEVELOPMENT_ENCRYPTION_KEYS,
        "ALLOWED_HOSTS": "shop.example.com,testserver",
    }
    env.update(overrides)
    return env


def in_subprocess(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh Django process (settings are read once per process)."""
    prelude = (
        "import django, json, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); django.setup()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + script], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )


def test_healthz_answers_while_the_process_is_up():
    response = Client().get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_is_200_when_database_and_broker_answer():
    response = Client().get("/readyz")
    assert (response.status_code, response.json()) == (200, {"database": "ok", "broker": "ok"})


def test_readyz_is_503_within_its_timeout_when_the_broker_is_down(settings):
    settings.MESSAGING = {**settings.MESSAGING, "BROKER_URL": CLOSED_PORT_BROKER}

    started = time.monotonic()
    response = Client().get("/readyz")

    assert (response.status_code, response.json()) == (503, {"database": "ok", "broker": "down"})
    assert time.monotonic() - started < 2.5


def test_readyz_is_503_naming_the_embedded_broker_while_its_folders_refuse_writes(settings, tmp_path):
    settings.MESSAGING = {**settings.MESSAGING, "BROKER_URL": "filesystem://"}
    settings.MESSAGING = {**settings.MESSAGING, "FILESYSTEM_DIR": tmp_path}
    assert Client().get("/readyz").json() == {"database": "ok", "broker": "ok"}

    # immutable: even root cannot create a file in it (chmod would not stop root)
    subprocess.run(["chattr", "+i", str(tmp_path / "data")], check=True)
    try:
        response = Client().get("/readyz")
    finally:
        subprocess.run(["chattr", "-i", str(tmp_path / "data")], check=True)

    assert (response.status_code, response.json()) == (503, {"database": "ok", "broker": "down"})
    assert Client().get("/readyz").status_code == 200
    assert list((tmp_path / "data").iterdir()) == []  # the probes left nothing behind


def test_readyz_is_200_when_the_first_node_of_a_cluster_url_is_down_and_another_answers(settings):
    live = settings.BROKER_URL
    settings.MESSAGING = {
        **settings.MESSAGING,
        "BROKER_URL": f"{CLOSED_PORT_BROKER};{CLOSED_PORT_BROKER.replace(':1/', ':2/')};{live}",
    }

    response = Client().get("/readyz")

    assert (response.status_code, response.json()) == (200, {"database": "ok", "broker": "ok"})


def test_readyz_is_503_when_every_node_of_a_cluster_url_is_down(settings):
    settings.MESSAGING = {
        **settings.MESSAGING,
        "BROKER_URL": f"{CLOSED_PORT_BROKER};{CLOSED_PORT_BROKER.replace(':1/', ':2/')}",
    }

    response = Client().get("/readyz")

    assert (response.status_code, response.json()) == (503, {"database": "ok", "broker": "down"})


def test_readyz_is_503_when_the_database_is_down():
    env = production_env(DATABASE_URL=CLOSED_PORT_DATABASE, GATEWAY_DATABASE_URL=CLOSED_PORT_DATABASE)
    result = in_subprocess(
        "from django.test import Client\nr = Client().get('/readyz')\nprint(json.dumps([r.status_code, r.json()]))",
        env,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [503, {"database": "down", "broker": "ok"}]


def test_with_https_the_deploy_check_is_silent():
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "DEBUG"],
        cwd=BASE_DIR,
        env=production_env(HTTPS="1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "System check identified no issues (0 silenced)."


def test_with_https_plain_http_is_redirected_except_the_probes_and_metrics():
    result = in_subprocess(
        "from django.test import Client\n"
        "c = Client(HTTP_HOST='shop.example.com')\n"
        "print(json.dumps({p: c.get(p).status_code for p in ['/healthz', '/readyz', '/metrics', '/admin/login/']}))\n"
        "s = c.get('/admin/login/', secure=True)\n"
        "print(json.dumps([s.status_code, s.headers.get('Strict-Transport-Security')]))",
        production_env(HTTPS="1"),
    )
    assert result.returncode == 0, result.stderr
    statuses, secure = (json.loads(line) for line in result.stdout.splitlines()[-2:])
    # /metrics answers (403: no METRICS_TOKEN with DEBUG off), not redirected: Prometheus scrapes over HTTP.
    assert statuses == {"/healthz": 200, "/readyz": 200, "/metrics": 403, "/admin/login/": 301}
    assert secure == [200, "max-age=31536000; includeSubDomains; preload"]


def test_without_debug_a_missing_secret_key_stops_the_process():
    env = production_env()
    del env["SECRET_KEY"]
    result = in_subprocess("print('started')", env)
    assert result.returncode == 1
    assert "SECRET_KEY" in result.stderr
