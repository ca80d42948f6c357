"""Each context carries its settings' defaults (``<context>/conf.py``): a deployment of it alone, or a
project that sets none of them, still runs; and the monolith's config/settings.py sets one only where
the environment overrides it. A context's own rules for one of its settings are its own tests' (payments'
gateway URL: payments/tests/unit/test_conf.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import conf as orchestrator_conf
from orders import conf as orders_conf
from payments import conf as payments_conf

BASE_DIR = Path(__file__).resolve().parents[2]
CONFS = [payments_conf, orders_conf, orchestrator_conf]


def monolith_values(names: list[str], **environ: str) -> dict:
    """The values config/settings.py gives (None: not set) with only ``environ`` of the environment set."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")} | environ
    values = f"{{n: getattr(settings, n, None) for n in {names!r}}}"
    script = f"from django.conf import settings; import json; print(json.dumps({values}))"
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", script],
        cwd=BASE_DIR,
        env={**env, "DEBUG": "1", "VAR_DIR": "/tmp/unused-var"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_monolith_sets_a_contexts_setting_only_where_the_environment_overrides_it():
    # SAGA_STYLE and CURRENCY are the composition root's too: it installs the orchestrator by the one,
    # and the bus checks every amount against the other.
    names = sorted({name for conf in CONFS for name in conf.DEFAULTS} - {"SAGA_STYLE", "CURRENCY"} | {"GATEWAY_URL"})
    assert monolith_values(names) == dict.fromkeys(names)
    overridden = monolith_values(
        ["GATEWAY_TIMEOUT", "GATEWAY_URL", "SAGA_TIMEOUT"], GATEWAY_TIMEOUT="2.5", SAGA_TIMEOUT="2m"
    )
    assert overridden == {"GATEWAY_TIMEOUT": 2.5, "GATEWAY_URL": None, "SAGA_TIMEOUT": 120.0}


@pytest.mark.parametrize("conf", CONFS, ids=lambda conf: conf.__name__)
def test_a_project_that_sets_none_of_them_gets_the_defaults(settings, conf):
    for name in conf.DEFAULTS:
        if hasattr(settings, name):
            delattr(settings, name)
    assert {name: conf.setting(name) for name in conf.DEFAULTS} == conf.DEFAULTS
