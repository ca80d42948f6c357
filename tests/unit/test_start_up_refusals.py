"""Settings that cannot work together are refused at start-up, in one line, before any order is
taken: every command of the deployment exits non-zero naming what to change."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from reliable_messaging.hosting import context_of, read_declarations

BASE_DIR = Path(__file__).resolve().parents[2]
# The contexts the orchestrated saga waits for (the producers of what the orchestrator consumes)
# that are not installed: its start-up then refuses (tests/e2e/test_context_removal.py), so the
# orchestrated combinations below cannot start, and are skipped saying why.
_WAITED_FOR = {context_of(key) for d in read_declarations(BASE_DIR, ("orchestrator",)) for key in d.consumes}
_MISSING = sorted(_WAITED_FOR - {"orchestrator", *(p.rsplit(".", 1)[-1] for p in settings.INSTALLED_CONTEXTS)})
needs_the_orchestrators_participants = pytest.mark.skipif(
    bool(_MISSING), reason=f"the orchestrated saga needs {', '.join(_MISSING)}, not installed (INSTALLED_CONTEXTS)"
)


def check(**environ: str) -> subprocess.CompletedProcess:
    ours = ("SAGA_STYLE", "ORCHESTRATOR", "EVENT_VERSIONS", "SAGA_TIMEOUT", "ORCHESTRATOR_STEP_TIMEOUT")
    env = {k: v for k, v in os.environ.items() if k not in ours}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=BASE_DIR,
        env={**env, "DEBUG": "1", **environ},
        capture_output=True,
        text=True,
        timeout=60,
    )


@needs_the_orchestrators_participants
def test_orchestration_with_the_order_created_event_pinned_to_v1_is_refused():
    done = check(SAGA_STYLE="orchestration", EVENT_VERSIONS="orders.order.created=1")
    assert done.returncode != 0
    assert (
        "SAGA_STYLE=orchestration needs orders.order.created v2 (v1 carries no saga style), but EVENT_VERSIONS "
        "pins it to v1: finish the rollout of v2 first, or keep the choreography"
    ) in done.stderr


@pytest.mark.parametrize(
    "environ",
    [
        pytest.param(
            {"SAGA_STYLE": "orchestration", "EVENT_VERSIONS": "orders.order.created=2"},
            marks=needs_the_orchestrators_participants,
        ),
        {"SAGA_STYLE": "choreography", "EVENT_VERSIONS": "orders.order.created=1"},
    ],
)
def test_the_combinations_that_work_start(environ):
    done = check(**environ)
    assert done.returncode == 0, done.stderr


@needs_the_orchestrators_participants
def test_the_default_step_deadlines_fit_in_the_saga_deadline_and_others_are_warned_of():
    assert "orchestrator.W001" not in check(ORCHESTRATOR="1").stderr
    warned = check(ORCHESTRATOR="1", ORCHESTRATOR_STEP_TIMEOUT="120")
    assert warned.returncode == 0  # a warning: a test's short saga deadline still runs
    assert (
        "(orchestrator.W001) ORCHESTRATOR_STEP_TIMEOUT x ORCHESTRATOR_STEP_ATTEMPTS (360 s) is not under "
        "SAGA_TIMEOUT (300 s): orders' deadline fails an unanswered order before the orchestrator gives its step "
        "up and compensates"
    ) in warned.stderr


@pytest.mark.parametrize("missing", [("SECRET_KEY",), ("ALLOWED_HOSTS",), ("SECRET_KEY", "ALLOWED_HOSTS")])
def test_make_serve_refuses_missing_settings_before_it_installs_anything(missing):
    """``make serve`` without SECRET_KEY or ALLOWED_HOSTS exits 2 in one line naming them, and never
    reaches nginx's installation (it ran apt-get first, then refused)."""
    probe = (
        "import sys; sys.path.insert(0, 'scripts'); import serve\n"
        "serve.ensure_nginx = lambda: print('INSTALLING NGINX', flush=True)\n"
        "sys.argv = ['serve.py']\n"
        "serve.main()\n"
    )
    given = {"SECRET_KEY": "k" * 50, "ALLOWED_HOSTS": "shop.example.com"}
    env = {k: v for k, v in os.environ.items() if k not in (*given, "DEBUG", "DJANGO_SETTINGS_MODULE")}
    env.update({name: "" if name in missing else value for name, value in given.items()})
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        f"make serve: {' and '.join(missing)} not set: make serve runs with DEBUG off, which needs both, "
        "e.g. SECRET_KEY=<50 random characters> ALLOWED_HOSTS=shop.example.com"
    ]


def test_without_debug_or_encryption_keys_the_key_derives_from_secret_key():
    show = [
        "shell",
        "--no-imports",
        "-c",
        "from django.conf import settings; print(*settings.MESSAGING['ENCRYPTION_KEYS'])",
    ]

    def key_ids(secret: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "manage.py", *show],
            cwd=BASE_DIR,
            env={
                **os.environ,
                "DEBUG": "0",
                "SECRET_KEY": secret,
                "ALLOWED_HOSTS": "shop.example.com",
                "MESSAGING_ENCRYPTION_KEYS": "",
            },  # fmt: skip
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    (first,) = key_ids("k" * 50)
    assert first.startswith("secret-") and key_ids("k" * 50) == [first]  # every deployment sharing it
    assert key_ids("j" * 50) != [first]  # another secret, another key and id


def test_encryption_keys_from_the_environment_start_and_a_malformed_one_is_refused():
    key = "c2hvcC0yMDI2LTExIGtleSwgMzIgYnl0ZXMgbG9uZyE="  # 32 bytes
    assert check(MESSAGING_ENCRYPTION_KEYS=f"2026-10={key},2026-11={key}").returncode == 0
    refused = check(MESSAGING_ENCRYPTION_KEYS="2026-11=c2hvcnQ=")
    assert refused.returncode != 0
    assert "MESSAGING['ENCRYPTION_KEYS']['2026-11']: give a non-empty key id and the base64 of 32 random bytes" in (
        refused.stderr
    )
