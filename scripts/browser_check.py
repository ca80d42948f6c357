#!/usr/bin/env python3
"""Open the admin console and the API docs in a real headless browser (Debian's Chromium).

Self-contained: installs ``chromium`` and ``chromium-driver`` with apt if they are missing
(needs root), builds a throwaway shop in the embedded mode (SQLite + filesystem broker in a
temporary folder, never your database), logs in as a throwaway superuser and checks that:

- the admin names the project, and its index links the saga overview;
- the overview draws its charts (orders per minute, the outbox's history, dead letters);
- an order's page draws the saga as a swimlane above its timeline: a confirmed order, a
  compensated one (out of stock, refunded), one waiting in the outbox and one whose payment
  became a dead letter; at 500 px the page is no wider than the window (its timeline scrolls
  in its own box); the swimlane also reads in a phone-sized window;
- every list (orders, outbox, inbox, event log, dead letters) and every table of an order's page
  fits its own box at 1400 px beside the sidebar (no table scrolls sideways, not only the page),
  no two different ids look alike (a short id must tell them apart), no text (an event type) is
  cut; a dead letter's own page offers replay and purge;
- /api/docs/ renders Swagger UI from our own static files, with every operation;
- no page reports a Content-Security-Policy violation in the browser's console;
- the same order pages and lists in a split (orders, payments, inventory and shipping as four
  deployments on four SQLite files sharing one filesystem broker), each deployment's admin; the
  dead letter, and its replay and purge, in the orders deployment's admin (where it lands);
- a return saga's admin page draws its saga (Mermaid, from our own static files) as an SVG,
  in the monolith and in the orders deployment of the split.

Screenshots go to var/browser-check/. Exit code 0 when every check passed.
Drives Debian's ChromeDriver through Selenium (both paths given, so Selenium Manager downloads nothing).
"""

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
from contextlib import suppress
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

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
    """A JSON request to a shop (its health, its checkout API)."""
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

    def __init__(self, folder: Path, contexts: str = "", database: str = "db.sqlite3"):
        self.env = {
            k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "BROKER_URL", "GATEWAY_DATABASE_URL")
        }
        self.env.update(
            {
                "DEBUG": "1",
                "VAR_DIR": str(folder),  # one filesystem broker for every deployment of the folder
                "DATABASE_URL": f"sqlite:///{folder / database}",
                **({"CONTEXTS": contexts} if contexts else {}),  # none: every installed context
                "PYTHONUNBUFFERED": "1",
                "CHECKOUT_THROTTLE": "off",
                "CONSUMER_MAX_ATTEMPTS": "2",  # a handler that keeps failing: a dead letter within one pass
                # One-shot passes, no long-running gateway service: the in-process stand-in, same
                # ledger (gateway.sqlite3); a charge that keeps failing is never given up here.
                "GATEWAY_URL": "inprocess:",
                "GATEWAY_CHARGE_ATTEMPTS": "1000",
            }
        )
        self.contexts = contexts.split(",") if contexts else []
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

    def prepare(self) -> None:
        self.manage("prepare_deployment")  # migrations and seed data, as each context declares

    def serve(self) -> None:
        """A superuser and the development server (where the API is hosted: orders)."""
        self.manage(
            "createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com",
            extra_env={"DJANGO_SUPERUSER_PASSWORD": self.password},
        )  # fmt: skip
        log = (self.folder / f"runserver-{self.port}.log").open("wb")
        self.server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"],
            cwd=BASE_DIR,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: http("GET", f"{self.url}/healthz")[0] == 200, 30, "the web server")

    def request_return(self, order_id: str) -> None:
        status, order = http("POST", f"{self.url}/api/orders/{order_id}/return/")
        assert status == 202, order

    def checkout(self, sku: str = "WIDGET", quantity: int = 1, token: str = "tok_visa") -> str:
        body = {"customer_id": "browser-check", "items": [{"sku": sku, "quantity": quantity}], "payment_token": token}
        status, order = http("POST", f"{self.url}/api/checkout/", body, {"Idempotency-Key": str(uuid.uuid4())})
        assert status == 201, order
        return order["id"]

    def stop(self) -> None:
        if self.server and self.server.poll() is None:
            self.server.terminate()
            self.server.wait(timeout=20)


def run_passes(deployments: list[Shop], passes: int = 6) -> None:
    """Every deployment's relay, consumers and gateway worker, one pass at a time: the sagas move only now."""
    for _ in range(passes):
        for deployment in deployments:
            deployment.manage("run_outbox_relay", "--once")
            deployment.manage("run_consumers", "--once")
            if not deployment.contexts or "payments" in deployment.contexts:
                deployment.manage("run_gateway_calls", "--once")


# A stock outcome for an order whose payment has not succeeded (its charge keeps failing): orders
# retries it, then dead-letters it, as it would a forged or overtaking one.
STOCK_RESERVED_TOO_EARLY = """
from django.db import transaction
from reliable_messaging.api import publish
with transaction.atomic():
    publish(event_type="inventory.stock.reserved", aggregate_type="reservation", aggregate_id="{order}",
            correlation_id="{order}", payload={{"order_id": "{order}", "items": [{{"sku": "WIDGET", "quantity": 1}}]}})
"""


def build(folder: Path, split: bool) -> tuple[Shop, list[Shop], dict[str, str]]:
    """A shop (one deployment, or three), with an order on each path to look at."""
    folder.mkdir()
    if split:
        deployments = [Shop(folder, c, f"{c}.sqlite3") for c in ("orders", "payments", "inventory", "shipping")]
        for deployment in deployments:  # as make run-split: each knows the others' databases
            deployment.env.update({f"{d.contexts[0].upper()}_DATABASE_URL": d.env["DATABASE_URL"] for d in deployments})
    else:
        deployments = [Shop(folder)]
    api = deployments[0]
    for deployment in deployments:
        deployment.prepare()
    run_passes(deployments, passes=2)  # the storefront hears of the catalogue
    for deployment in deployments:  # each its admin; orders also the API
        deployment.serve()
    orders = {
        "confirmed": api.checkout(),
        "compensated": api.checkout("LIMITED-PRINT", 4),  # charged, out of stock, refunded
        "dead-letter": api.checkout(token="tok_unavailable"),  # its charge keeps failing: in flight
    }
    returned = api.checkout()  # confirmed, then returned: a return saga for its admin page
    run_passes(deployments, passes=2)
    inventory = next(d for d in deployments if not d.contexts or "inventory" in d.contexts)
    inventory.manage("shell", "-c", STOCK_RESERVED_TOO_EARLY.format(order=orders["dead-letter"]))
    run_passes(deployments)
    api.request_return(returned)  # the saga starts with the request: its diagram needs no more passes
    orders["waiting"] = api.checkout()  # no relay runs from now on: it stays in the outbox
    return api, deployments, orders


class Browser(webdriver.Chrome):
    """Headless Chromium, with the few page probes the checks share."""

    def __init__(self, profile: Path):
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM  # with the driver's path: Selenium Manager is never asked
        for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for CSP violations
        super().__init__(service=Service(CHROMEDRIVER), options=options)

    def find(self, css: str) -> list[WebElement]:
        return self.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        return "\n".join(e.text for e in self.find(css))

    def until(self, predicate, timeout: float, what: str) -> None:
        """Wait for ``predicate()``; a page still drawing may replace the elements it reads."""
        wait = WebDriverWait(self, timeout, ignored_exceptions=[StaleElementReferenceException])
        wait.until(lambda _: predicate(), f"timed out after {timeout}s waiting for {what}")

    def screenshot(self, name: str, css: str | None = None) -> Path:
        """The window, or only the element ``css`` selects (a chart, the swimlane)."""
        path = SHOTS / f"{name}.png"
        if css:
            self.find(css)[0].screenshot(str(path))
        else:
            self.save_screenshot(str(path))
        return path

    def csp_violations(self) -> list[str]:
        """Console messages about the Content-Security-Policy since the last call (ChromeDriver
        hands each console entry over once)."""
        return [e["message"] for e in self.get_log("browser") if "Content Security Policy" in e["message"]]

    def covered_titles(self, css: str) -> list[str]:
        """The page's titles (h1, h2 of #content) whose box meets the box of ``css``: buttons
        floated over a long title hide part of it (a message id)."""
        return self.execute_script(
            """const box = document.querySelector(arguments[0]).getBoundingClientRect();
            return [...document.querySelectorAll('#content h1, #content > h2')].filter(title => {
              const r = title.getBoundingClientRect();
              return r.left < box.right && box.left < r.right && r.top < box.bottom && box.top < r.bottom;
            }).map(title => title.textContent.trim());""",
            css,
        )

    def fits_the_window(self) -> bool:
        return self.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")

    def overflowing_tables(self) -> list[str]:
        """Every table, and every box that scrolls sideways, wider than its box (Django's lists sit
        in a box that scrolls: the page fits while the table does not)."""
        return self.execute_script(
            "const name = e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (typeof e.className"
            "  === 'string' && e.className.trim() ? '.' + e.className.trim().split(/\\s+/)[0] : '');"
            "const out = [];"
            "for (const e of document.querySelectorAll('#content table, #content *')) {"
            "  const scrolls = ['auto', 'scroll'].includes(getComputedStyle(e).overflowX);"
            "  if (e.tagName !== 'TABLE' && !scrolls) continue;"
            "  const box = scrolls ? e : e.parentElement;"
            "  if (box.scrollWidth > box.clientWidth + 1)"
            "    out.push(`${name(e)}: ${box.scrollWidth} px in a ${box.clientWidth} px box`); }"
            "return [...new Set(out)];"
        )

    def ids_that_look_alike(self) -> list[str]:
        """Short ids (the whole id on hover) that stand for more than one id."""
        return self.execute_script(
            "const shown = new Map();"
            "for (const e of document.querySelectorAll('#content [title]')) {"
            "  const full = e.getAttribute('title'), text = e.textContent.trim();"
            "  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-/i.test(full) || !text || text === full) continue;"
            "  if (!shown.has(text)) shown.set(text, new Set()); shown.get(text).add(full); }"
            "return [...shown].filter(([t, s]) => s.size > 1).map(([t, s]) => `${t} stands for ${s.size} ids`);"
        )

    def cut_texts(self) -> list[str]:
        """Words cut short with an ellipsis at their end (an event type, a timestamp prefix)."""
        return self.execute_script(
            "const out = [];"
            "for (const e of document.querySelectorAll('#result_list, #saga-status, #saga-timeline'))"
            "  out.push(...(e.innerText.match(/[A-Za-z0-9_.]+…/g) || []));"
            "return [...new Set(out)].slice(0, 5);"
        )

    def widest(self) -> str:
        """The element reaching furthest right, for a page that does not fit."""
        return self.execute_script(
            "let far = null, right = 0;"
            "for (const e of document.querySelectorAll('body *')) {"
            "  const r = e.getBoundingClientRect().right; if (r > right) { right = r; far = e; } }"
            "return far ? `${far.tagName.toLowerCase()}#${far.id}.${far.className}`"
            "  + ` ends at ${Math.round(right)} px` : '';"
        )


Check = list[tuple[str, bool, str]]
CHARTS = ("#orders-per-minute", "#outbox-history", "#dead-letters-chart")


def checker(results: Check, prefix: str):
    def check(name: str, ok: bool, detail: str = "") -> None:
        results.append((f"{prefix}{name}", bool(ok), detail))
        print(f"  [{'ok' if ok else 'FAIL'}] {prefix}{name}{': ' + detail if detail else ''}", flush=True)

    return check


def log_in(shop: Shop, browser: Browser) -> None:
    browser.get(f"{shop.url}/admin/login/")
    browser.find("#id_username")[0].send_keys("ops")
    browser.find("#id_password")[0].send_keys(shop.password)
    browser.find("input[type=submit]")[0].click()
    browser.until(lambda: browser.find("#saga-overview-link"), 15, "the admin index")


def check_order_pages(shop: Shop, browser: Browser, orders: dict[str, str], check, shots: str, split: bool) -> None:
    """The swimlane of each path, and what each must show."""
    expected = {
        "confirmed": ("saga-outcome", "saga is complete"),
        "compensated": ("saga-compensation", "the order failed, no sale"),
        "waiting": ("saga-waiting", "in the outbox"),
        # The stock outcome that came before the payment: a dead letter in orders' own database.
        "dead-letter": ("saga-waiting", "dead letter at orders"),
    }
    for n, (path, order_id) in enumerate(orders.items(), start=1):
        browser.get(f"{shop.url}/admin/orders/order/{order_id}/change/")
        marks = browser.find("#saga-swimlane svg g.saga-event")
        mark_class, banner_text = expected[path]
        found = browser.find(f"#saga-swimlane svg g.{mark_class}")
        banner = browser.text("#saga-status")
        check(f"{path} order: swimlane above its timeline", marks and found and banner_text in banner,
              f"{len(marks)} events; {banner.splitlines()[0] if banner else '-'}")  # fmt: skip
        if path == "dead-letter" and not split:
            check("a dead-lettered handling is drawn", browser.find("#saga-swimlane svg g.saga-dead-letter"))
        fits = browser.fits_the_window()
        check(f"{path} order page fits 1400 px without sideways scrolling", fits, "" if fits else browser.widest())
        check_readable(browser, check, f"{path} order page")
        browser.screenshot(f"{shots}-{n:02d}-swimlane-{path}", "#saga-swimlane")
        browser.screenshot(f"{shots}-{n:02d}-order-{path}")


LISTS = {
    "orders": "orders/order/",
    "outbox": "messaging/outboxmessage/",
    "inbox": "messaging/inboxmessage/",
    "event log": "messaging/eventlogentry/",
    "dead letters": "messaging/deadletter/",
}


def check_readable(browser: Browser, check, page: str) -> None:
    """Every table fits its box, no two ids look alike, nothing is cut."""
    wide = browser.overflowing_tables()
    check(f"{page}: every table fits its box at 1400 px", not wide, "; ".join(wide))
    alike = browser.ids_that_look_alike()
    check(f"{page}: no two ids look alike", not alike, "; ".join(alike))
    cut = browser.cut_texts()
    check(f"{page}: no text cut short", not cut, ", ".join(cut))


def check_saga_diagram(shop: Shop, browser: Browser, check, shot: str) -> None:
    """The first return saga's admin page: Mermaid (our static files) draws its saga as an SVG. A
    definition Mermaid could not read would draw an error, not a state diagram."""
    browser.get(f"{shop.url}/admin/orders/returnsaga/")
    links = browser.find("#result_list tbody tr th a")
    if links:
        links[0].click()
    drawn = 'pre.mermaid svg[aria-roledescription^="stateDiagram"]'
    with suppress(TimeoutException):  # the check below says what is missing
        browser.until(lambda: browser.find(drawn), 30, "Mermaid's drawing")
    states = browser.execute_script(  # its labels are HTML in the SVG: their text, seen or not
        "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent).join(' ')", f"{drawn} .node"
    )
    # A state with a step is labelled with its command (Mermaid shows the description), one without by its name.
    check(
        "a return saga's page draws its saga (Mermaid, an SVG)",
        links and browser.find(drawn) and "orders.return.book_pickup" in states and "returned" in states,
        "no return saga to open" if not links else f"{len(browser.find(f'{drawn} .node'))} states drawn",
    )
    # Its own size (Mermaid's max-width) or the row's width, not shrunk to the 300 px of an SVG without a width.
    width, wanted = browser.execute_script(
        "const svg = document.querySelector(arguments[0]); if (!svg) return [0, 1];"
        "const box = getComputedStyle(svg.parentElement);"
        "const inside = svg.parentElement.clientWidth - parseFloat(box.paddingLeft) - parseFloat(box.paddingRight);"
        "return [svg.getBoundingClientRect().width, Math.min(parseFloat(svg.style.maxWidth), inside)]",
        drawn,
    )
    check("the saga's diagram is drawn at a readable size", width >= wanted - 1, f"{width:.0f} px of {wanted:.0f}")
    browser.screenshot(shot)
    if browser.find(drawn):  # the window at the drawing (taller than the window: an element's shot is cut)
        browser.execute_script("document.querySelector('pre.mermaid').scrollIntoView()")
        browser.screenshot(f"{shot}-diagram")


def check_lists(shop: Shop, browser: Browser, check, shots: str, names=tuple(LISTS)) -> None:
    """Each list of this deployment's admin, at 1400 px with the sidebar open."""
    for n, name in enumerate(names, start=1):
        browser.get(f"{shop.url}/admin/{LISTS[name]}")
        rows = len(browser.find("#result_list tbody tr"))
        check(f"{name} list shows rows", rows > 0, f"{rows} rows")
        check(f"{name} list page fits 1400 px", browser.fits_the_window(), browser.widest())
        check_readable(browser, check, f"{name} list")
        browser.screenshot(f"{shots}-{n:02d}-{name.replace(' ', '-')}-list")


def check_dead_letter_page(shop: Shop, browser: Browser, check, shot: str) -> None:
    """The first dead letter of this deployment's list: its page offers replay and purge."""
    browser.get(f"{shop.url}/admin/messaging/deadletter/")
    links = browser.find("#result_list tbody tr th a")
    if links:
        links[0].click()
    offered = links and browser.find("#action-replay") and browser.find("#action-purge")
    check("a dead letter's page offers replay and purge", offered, "" if links else "no dead letter to open")
    if offered:
        covered = browser.covered_titles(".object-tools")
        check("a dead letter's buttons cover no part of its title", not covered, "; ".join(covered))
    browser.screenshot(shot)


def run_checks(shop: Shop, browser: Browser, orders: dict[str, str]) -> Check:
    results: Check = []
    check = checker(results, "")
    log_in(shop, browser)
    header = browser.text("#site-name")
    check("the admin names the project", header == "Saga shop operations", header)
    check("admin index links the saga overview", "Saga overview" in browser.text("#saga-overview-link"))
    browser.screenshot("01-admin-index")

    browser.get(f"{shop.url}/admin/overview/")
    charts = {
        css: browser.find(f"{css} svg") for css in ("#orders-per-minute", "#outbox-history", "#dead-letters-chart")
    }
    check("overview draws its three charts", all(charts.values()), ", ".join(c for c, f in charts.items() if f))
    browser.screenshot("02-overview")
    for css in charts:
        browser.screenshot(f"02-chart-{css[1:]}", css)

    check_order_pages(shop, browser, orders, check, "03", split=False)
    browser.get(f"{shop.url}/admin/orders/order/{orders['compensated']}/change/")
    box = browser.find(".ops-swimlane")[0]
    fits = browser.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth", box)
    check("at 1400 px the swimlane fits its box, beside the admin's sidebar", fits)

    check_lists(shop, browser, check, "04")
    browser.get(f"{shop.url}/admin/orders/order/")
    shown = [e for e in browser.text("#result_list tbody").splitlines() if e.strip()]
    newest = bool(shown) and orders["waiting"][-8:] in shown[0]
    check("the newest order is on top of the orders list", newest, shown[0] if shown else "-")
    check_dead_letter_page(shop, browser, check, "05-dead-letter")
    check_saga_diagram(shop, browser, check, "05-return-saga")

    browser.set_window_size(500, 900)  # narrow: the page keeps its width, its wide tables scroll in their boxes
    browser.get(f"{shop.url}/admin/orders/order/{orders['compensated']}/change/")
    page, window = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    check("at 500 px an order's page is no wider than the window", page <= window, f"{page} px: {browser.widest()}")

    browser.set_window_size(390, 844)  # a phone
    browser.get(f"{shop.url}/admin/orders/order/{orders['compensated']}/change/")
    boxed = browser.execute_script(
        "const box = document.querySelector('.ops-swimlane'), svg = box.querySelector('svg');"
        "return box.scrollWidth > box.clientWidth && svg.clientWidth >= parseFloat(svg.style.minWidth)"
    )
    check("on a phone the swimlane keeps a readable size and scrolls in its own box", boxed)
    browser.execute_script("document.querySelector('#saga-swimlane').scrollIntoView()")
    browser.screenshot("06-phone-swimlane")
    browser.set_window_size(1400, 1100)

    browser.get(f"{shop.url}/api/docs/")
    with suppress(TimeoutException):  # the check below says what is missing
        browser.until(lambda: len(browser.find(".swagger-ui .opblock")) >= 6, 20, "Swagger UI's operations")
    paths = browser.text(".swagger-ui .opblock-summary-path")
    check(
        "API docs render every operation",
        all(p in paths for p in ["/api/checkout/", "/api/orders/{order_id}/", "/api/products/", "/readyz"]),
        f"{len(browser.find('.swagger-ui .opblock'))} operations",
    )
    browser.screenshot("07-api-docs")
    browser.find(".swagger-ui #operations-orders-checkout .opblock-summary")[0].click()
    browser.until(lambda: "Idempotency-Key" in browser.text("#operations-orders-checkout"), 10, "checkout's details")
    check("checkout documents Idempotency-Key", "Idempotency-Key" in browser.text("#operations-orders-checkout"))
    browser.screenshot("08-api-docs-checkout")
    violations = browser.csp_violations()
    check("no page broke the Content-Security-Policy (the console)", not violations, "; ".join(violations)[:600])
    # The probe itself: an inline script, which the policy forbids, must show in the console.
    browser.execute_script("const s = document.createElement('script'); s.textContent = '1'; document.body.append(s)")
    check("an inline script is refused and reported (the check above can fail)", browser.csp_violations())
    return results


def run_split_checks(deployments: list[Shop], browser: Browser, orders: dict[str, str]) -> Check:
    """The orders deployment of a split: its pages show what it knows of the other two; every
    deployment's lists fit and tell ids apart."""
    results: Check = []
    check = checker(results, "split: ")
    shop = deployments[0]
    log_in(shop, browser)
    check("the orders deployment hosts only orders", "Contexts hosted here: orders" in browser.text("#content"))
    check_order_pages(shop, browser, orders, check, "11-split", split=True)
    browser.get(f"{shop.url}/admin/orders/order/{orders['confirmed']}/change/")
    handled = browser.text("#saga-timeline")
    check("other contexts' handling known from the events they caused", "another deployment" in handled)
    banner = browser.text("#saga-status")
    check("the banner says what this deployment cannot know", "run in other deployments" in banner, banner)
    browser.get(f"{shop.url}/admin/overview/")
    check("the overview draws its charts", len(browser.find(".ops-chart svg")) == 3)
    browser.screenshot("12-split-overview")
    # The dead letter is orders' own: the stock outcome that came before its payment, refused by
    # orders' handler in orders' database (payments retries a failing charge, never dead-letters it).
    check_lists(shop, browser, check, "13-split-orders", ("orders", "outbox", "inbox", "event log", "dead letters"))
    check_dead_letter_page(shop, browser, check, "13-split-orders-06-dead-letter")
    check_saga_diagram(shop, browser, check, "13-split-orders-07-return-saga")
    for other in deployments[1:]:  # each its own login: cookies go by host and port
        context = other.contexts[0]
        log_in(other, browser)
        hosted = browser.text("#content")
        check(f"the {context} deployment's admin hosts {context}", f"Contexts hosted here: {context}" in hosted)
        check_lists(other, browser, checker(results, f"split: {context}: "), f"14-split-{context}", ("outbox", "inbox"))
    violations = browser.csp_violations()
    check("no page broke the Content-Security-Policy (the console)", not violations, "; ".join(violations)[:600])
    return results


def main() -> int:
    ensure_chromium()
    SHOTS.mkdir(parents=True, exist_ok=True)
    for old in SHOTS.glob("*.png"):
        old.unlink()
    work = Path(tempfile.mkdtemp(prefix="browser-check-"))
    shops: list[Shop] = []
    browser, results = None, []
    try:
        print(f"Throwaway shops in {work} ...", flush=True)
        monolith, deployments, orders = build(work / "monolith", split=False)
        shops += deployments
        _, split_deployments, split_orders = build(work / "split", split=True)
        shops += split_deployments
        print(f"Chromium {subprocess.run([CHROMIUM, '--version'], capture_output=True, text=True).stdout.strip()}")
        browser = Browser(work / "profile")
        results = run_checks(monolith, browser, orders)
        results += run_split_checks(split_deployments, browser, split_orders)  # its own login: cookies go by host
    finally:
        if browser:
            browser.quit()
        for shop in shops:
            shop.stop()
        shutil.rmtree(work, ignore_errors=True)
    failed = [name for name, ok, _ in results if not ok]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed; screenshots in {SHOTS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
