"""Real web processes for tests that talk HTTP: ``make run``'s development server and gunicorn.

Two modes, because Django behaves differently in each: ``runserver`` with ``DEBUG`` on (what
``make run`` starts and outside tests use) and gunicorn with ``DEBUG`` off (production).
"""

import json
import secrets
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field

from django.conf import settings

from faultlib.processes import ProcessGroup, free_port, wait_until

MODES = ("runserver-debug", "gunicorn-production")


def web_argv(mode: str, port: int) -> list[str]:
    if mode == "runserver-debug":
        return [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    return [
        *(sys.executable, "-m", "gunicorn", "config.wsgi", "-c", "service_platform/gunicorn.conf.py"),
        *("-w", "2", "-b", f"127.0.0.1:{port}", "--access-logfile", "/dev/null"),
    ]


def web_env(mode: str) -> dict[str, str]:
    if mode == "runserver-debug":
        return {"DEBUG": "1"}
    # Tests place many orders from one address: no production per-client limit (test_web_tier tests it).
    return {
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(40),
        "MESSAGING_ENCRYPTION_KEYS": settings.DEVELOPMENT_ENCRYPTION_KEYS,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "CHECKOUT_THROTTLE": "off",
    }


def start_web(group: ProcessGroup, mode: str, env: dict[str, str] | None = None, name: str = "web") -> str:
    """Start a web process in ``mode``; its base URL once it answers ``/healthz``."""
    port = free_port()
    group.spawn(name, web_argv(mode, port), env={**web_env(mode), **(env or {})})
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: get(base, "/healthz").status == 200, timeout=30, message=f"{mode} to answer")
    return base


@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict = field(default_factory=dict)

    def json(self):
        return json.loads(self.body)


def call(
    base: str,
    method: str,
    path: str,
    body=None,
    *,
    raw: bytes | None = None,
    headers: dict | None = None,
    timeout: float = 30,
) -> Reply:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(
        f"{base}{path}", data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Reply(response.status, response.read(), dict(response.headers))
    except urllib.error.HTTPError as error:
        return Reply(error.code, error.read(), dict(error.headers))
    except OSError:
        return Reply(0, b"")


def get(base: str, path: str, **kwargs) -> Reply:
    return call(base, "GET", path, **kwargs)


def checkout_body(sku: str = "WIDGET", quantity: int = 1, token: str = "tok_visa", **extra) -> dict:
    return {"customer_id": "web-test", "items": [{"sku": sku, "quantity": quantity}], "payment_token": token, **extra}


def post_checkout(base: str, body: dict, *, path: str = "/api/checkout/", key: str | None = None, **kwargs) -> Reply:
    headers = {"Idempotency-Key": key or str(uuid.uuid4())}
    return call(base, "POST", path, body, headers=headers, **kwargs)
