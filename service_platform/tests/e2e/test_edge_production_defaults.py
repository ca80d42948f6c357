"""Production's defaults against a hostile client (issue 43), each in a fresh process with DEBUG
off (settings are read once per process): /metrics is not public without METRICS_TOKEN (403 naming
it) unless METRICS_PUBLIC=1, and checkout has a per-client limit unless CHECKOUT_THROTTLE says
otherwise. With DEBUG on both stay as they were: /metrics open, checkout unthrottled."""

import json
import os
import secrets
import subprocess
import sys

import pytest
from django.conf import settings

from faultlib.processes import BASE_DIR, database_url

pytestmark = pytest.mark.django_db

SCRIPT = """
import django, json, os
os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings')
django.setup()
from django.test import Client
from rest_framework.settings import api_settings
c = Client()
answers = [c.get('/metrics'), c.get('/metrics', headers={'Authorization': 'Bearer s3cret'})]
print(json.dumps({
    'metrics': [a.status_code for a in answers],
    'refusal': answers[0].content.decode() if answers[0].status_code == 403 else None,
    'checkout_rate': api_settings.DEFAULT_THROTTLE_RATES['checkout'],
}))
"""
REFUSAL = (
    "/metrics is not public with DEBUG off: set METRICS_TOKEN and scrape with "
    "'Authorization: Bearer <token>' (or METRICS_PUBLIC=1 to serve it to anyone)\n"
)


def settled(debug: bool, **env: str) -> dict:
    """What a fresh process answers on /metrics (without, then with a bearer token) and its checkout rate."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if key not in ("METRICS_TOKEN", "METRICS_PUBLIC", "CHECKOUT_THROTTLE")
    }
    environ |= {"DATABASE_URL": database_url(), "GATEWAY_DATABASE_URL": database_url(), "DEBUG": "1" if debug else "0"}
    environ |= {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "testserver",
        "MESSAGING_ENCRYPTION_KEYS": settings.DEVELOPMENT_ENCRYPTION_KEYS,
        **env,
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=BASE_DIR, env=environ, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_without_debug_metrics_needs_a_token_or_an_explicit_public_and_checkout_is_limited_per_client():
    assert settled(False) == {"metrics": [403, 403], "refusal": REFUSAL, "checkout_rate": "30/min"}
    assert settled(False, METRICS_TOKEN="s3cret")["metrics"] == [401, 200]
    assert settled(False, METRICS_PUBLIC="1")["metrics"] == [200, 200]


def test_an_explicit_checkout_throttle_wins_with_debug_on_or_off():
    assert settled(False, CHECKOUT_THROTTLE="off")["checkout_rate"] is None
    assert settled(False, CHECKOUT_THROTTLE="5/min")["checkout_rate"] == "5/min"
    assert settled(True, CHECKOUT_THROTTLE="5/min")["checkout_rate"] == "5/min"


def test_with_debug_on_metrics_stay_open_and_checkout_unthrottled():
    assert settled(True) == {"metrics": [200, 200], "refusal": None, "checkout_rate": None}
