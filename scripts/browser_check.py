#!/usr/bin/env python3
"""Open the admin console and the API docs in a real headless browser (Debian's Chromium).

Self-contained: installs ``chromium`` and ``chromium-driver`` with apt if they are missing
(needs root), builds a throwaway shop in the embedded mode (SQLite + filesystem broker in a
temporary folder, never your database), logs in as a throwaway superuser and checks that:

- the admin index links the saga overview, and the overview renders;
- a finished order's page shows its whole timeline and says nothing is waiting;
- a fresh order's page says it waits in the outbox;
- the outbox list shows its backlog; the dead letters list renders;
- /api/docs/ renders Swagger UI from our own static files, with every operation.

Screenshots go to var/browser-check/. Exit code 0 when every check passed.
Drives ChromeDriver through the W3C WebDriver protocol over plain HTTP (no client library).
"""

import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SHOTS = BASE_DIR / "var" / "browser-check"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
# As the machine's own probe starts it: no sandbox as root, no background traffic to a closed network.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1100",
]
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


def ensure_chromium() -> None:
    if Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists():
        return
    if os.geteuid() != 0:
        sys.exit("Chromium is not installed. As root: apt-get install -y chromium chromium-driver")
    print("Installing Debian's chromium and chromium-driver (apt-get)...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", "chromium", "chromium-driver"], check=True, env=env)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(method: str, url: str, body=None, headers=None, timeout: float = 30):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except OSError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


class Shop:
    """A throwaway shop in the embedded mode, in its own folder."""

    def __init__(self, folder: Path):
        self.env = {
            k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "BROKER_URL", "GATEWAY_DATABASE_URL")
        }
        self.env.update({"DEBUG": "1", "VAR_DIR": str(folder), "PYTHONUNBUFFERED": "1", "CHECKOUT_THROTTLE": "off"})
        self.folder = folder
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(16)
        self.server = None

    def manage(self, *args: str, extra_env=None) -> None:
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=BASE_DIR,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}{result.stderr}")

    def start(self) -> None:
        self.manage("migrate", "--noinput")
        self.manage("migrate", "--database", "gateway", "--noinput")
        self.manage("seed_catalog")
        self.manage("run_outbox_relay", "--once")
        self.manage("run_consumers", "--once")  # the storefront hears of the catalogue
        self.manage(
            "createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com",
            extra_env={"DJANGO_SUPERUSER_PASSWORD": self.password},
        )  # fmt: skip
        log = (self.folder / "runserver.log").open("wb")
        self.server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"],
            cwd=BASE_DIR,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: http("GET", f"{self.url}/healthz")[0] == 200, 30, "the web server")

    def checkout(self) -> str:
        body = {
            "customer_id": "browser-check",
            "items": [{"sku": "WIDGET", "quantity": 1}],
            "payment_token": "tok_visa",
        }
        status, order = http("POST", f"{self.url}/api/checkout/", body, {"Idempotency-Key": str(uuid.uuid4())})
        assert status == 201, order
        return order["id"]

    def run_saga(self, order_id: str) -> None:
        """Relay and consumers, one pass at a time, until the order is decided and told."""
        for _ in range(6):
            self.manage("run_outbox_relay", "--once")
            self.manage("run_consumers", "--once")
            if http("GET", f"{self.url}/api/orders/{order_id}/")[1]["status"] != "PENDING":
                self.manage("run_outbox_relay", "--once")
                self.manage("run_consumers", "--once")
                return
        raise RuntimeError(f"order {order_id} is still PENDING")

    def stop(self) -> None:
        if self.server and self.server.poll() is None:
            self.server.terminate()
            self.server.wait(timeout=20)


class Browser:
    """Just enough of the W3C WebDriver protocol."""

    def __init__(self, profile: Path):
        self.port = free_port()
        self.driver = subprocess.Popen(
            [CHROMEDRIVER, f"--port={self.port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.base = f"http://127.0.0.1:{self.port}"
        wait_for(lambda: http("GET", f"{self.base}/status")[1]["value"]["ready"], 30, "chromedriver")
        options = {"binary": CHROMIUM, "args": [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]}
        status, reply = http(
            "POST",
            f"{self.base}/session",
            {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}},
            timeout=60,
        )
        if status != 200:
            raise RuntimeError(f"could not start Chromium: {reply}")
        self.session = f"{self.base}/session/{reply['value']['sessionId']}"

    def command(self, method: str, path: str, body=None):
        status, reply = http(method, self.session + path, body)
        if status != 200:
            raise RuntimeError(f"{method} {path}: {reply['value']}")
        return reply["value"]

    def open(self, url: str) -> None:
        self.command("POST", "/url", {"url": url})

    def find(self, css: str) -> list[str]:
        return [e[ELEMENT] for e in self.command("POST", "/elements", {"using": "css selector", "value": css})]

    def text(self, css: str) -> str:
        return "\n".join(self.command("GET", f"/element/{e}/text") for e in self.find(css))

    def type(self, css: str, text: str) -> None:
        self.command("POST", f"/element/{self.find(css)[0]}/value", {"text": text})

    def click(self, css: str) -> None:
        self.command("POST", f"/element/{self.find(css)[0]}/click", {})

    def screenshot(self, name: str) -> Path:
        path = SHOTS / f"{name}.png"
        path.write_bytes(base64.b64decode(self.command("GET", "/screenshot")))
        return path

    def close(self) -> None:
        try:
            http("DELETE", self.session)
        finally:
            self.driver.terminate()
            self.driver.wait(timeout=20)


def run_checks(shop: Shop, browser: Browser, done_id: str, fresh_id: str) -> list[tuple[str, bool, str]]:
    results = []

    def check(name: str, ok: bool, detail: str = "") -> None:
        results.append((name, bool(ok), detail))
        print(f"  [{'ok' if ok else 'FAIL'}] {name}{': ' + detail if detail else ''}", flush=True)

    browser.open(f"{shop.url}/admin/login/")
    browser.type("#id_username", "ops")
    browser.type("#id_password", shop.password)
    browser.click("input[type=submit]")
    wait_for(lambda: browser.find("#saga-overview-link"), 15, "the admin index")
    check("login, admin index links the saga overview", "Saga overview" in browser.text("#saga-overview-link"))
    browser.screenshot("01-admin-index")

    browser.open(f"{shop.url}/admin/overview/")
    check("overview renders its figures", browser.find("#outbox-pending") and browser.find("#dead-letters"))
    browser.screenshot("02-overview")

    browser.open(f"{shop.url}/admin/orders/order/{done_id}/change/")
    rows = browser.find("#saga-timeline tbody tr.timeline-published")
    banner = browser.text("#saga-status")
    check("finished order: whole timeline, nothing waiting", len(rows) == 4 and "saga is complete" in banner,
          f"{len(rows)} published events; {banner.splitlines()[0] if banner else '-'}")  # fmt: skip
    browser.screenshot("03-order-confirmed")

    browser.open(f"{shop.url}/admin/orders/order/{fresh_id}/change/")
    banner = browser.text("#saga-status")
    check("fresh order: waits in the outbox", "in the outbox" in banner and "orders.order.created" in banner)
    browser.screenshot("04-order-waiting")

    browser.open(f"{shop.url}/admin/messaging/outboxmessage/?state=pending")
    check("outbox list shows its backlog", "pending" in browser.text("#outbox-backlog"))
    browser.screenshot("05-outbox")

    browser.open(f"{shop.url}/admin/messaging/deadletter/")
    check("dead letters list renders", browser.find("#changelist"))

    browser.open(f"{shop.url}/api/docs/")
    try:
        wait_for(lambda: len(browser.find(".swagger-ui .opblock")) >= 6, 20, "Swagger UI's operations")
    except TimeoutError:
        pass
    paths = browser.text(".swagger-ui .opblock-summary-path")
    check(
        "API docs render every operation",
        all(p in paths for p in ["/api/checkout/", "/api/orders/{order_id}/", "/api/products/", "/readyz"]),
        f"{len(browser.find('.swagger-ui .opblock'))} operations",
    )
    browser.screenshot("06-api-docs")
    browser.click(".swagger-ui #operations-orders-checkout .opblock-summary")
    wait_for(lambda: "Idempotency-Key" in browser.text("#operations-orders-checkout"), 10, "checkout's details")
    check("checkout documents Idempotency-Key", "Idempotency-Key" in browser.text("#operations-orders-checkout"))
    browser.screenshot("07-api-docs-checkout")
    return results


def main() -> int:
    ensure_chromium()
    SHOTS.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="browser-check-"))
    shop, browser = Shop(work / "shop"), None
    shop.folder.mkdir()
    try:
        print(f"Throwaway shop in {shop.folder} ...", flush=True)
        shop.start()
        done_id = shop.checkout()
        shop.run_saga(done_id)
        fresh_id = shop.checkout()  # no relay runs now: it stays in the outbox
        print(f"Chromium {subprocess.run([CHROMIUM, '--version'], capture_output=True, text=True).stdout.strip()}")
        browser = Browser(work / "profile")
        results = run_checks(shop, browser, done_id, fresh_id)
    finally:
        if browser:
            browser.close()
        shop.stop()
        shutil.rmtree(work, ignore_errors=True)
    failed = [name for name, ok, _ in results if not ok]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed; screenshots in {SHOTS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
