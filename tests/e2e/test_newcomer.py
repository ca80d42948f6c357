"""What a newcomer pastes and an operator reads, run for real: the README's "Try it" block
against `make run`, the commands `make run-split` and the order page print, and the one-line
answers to a taken metrics port and a missing SECRET_KEY. Embedded mode, each in a temp folder.
"""

import html
import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
from reliable_messaging._declarations import installed

from faultlib.ports import bindable
from faultlib.processes import BASE_DIR, ProcessGroup, free_port, wait_until

pytestmark = pytest.mark.embedded

README = BASE_DIR / "README.md"
SERVICE_VARIABLES = {"DATABASE_URL", "BROKER_URL", "GATEWAY_DATABASE_URL", "TEST_DATABASE_NAME", "VAR_DIR", "DEBUG"}


def clean_env(**extra: str) -> dict[str, str]:
    """This machine's environment without the test run's database and broker: the embedded mode."""
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARIABLES and not k.endswith("_DATABASE_URL")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def get_json(url: str):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)
    except (urllib.error.URLError, ConnectionError):
        return None


def checkout(base: str, token: str) -> str:
    body = {"customer_id": "newcomer", "items": [{"sku": "WIDGET", "quantity": 1}], "payment_token": token}
    request = urllib.request.Request(
        f"{base}/api/checkout/",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": str(uuid.uuid4())},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
        return json.load(response)["id"]


def status_of(base: str, order_id: str) -> str | None:
    return (get_json(f"{base}/api/orders/{order_id}/") or {}).get("status")


def ctrl_c(group: ProcessGroup, proc: subprocess.Popen) -> str:
    """Ctrl-C as a terminal sends it (to the whole process group); the output once it has ended
    (at once if it ended before: the log then says why)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)
    return group.logs(tail=100_000)


def shell(command: str, **env: str) -> subprocess.CompletedProcess:
    """``command`` pasted into bash in the project's folder, with only ``env`` added to a clean one."""
    return subprocess.run(
        ["bash", "-c", command], cwd=BASE_DIR, env=clean_env(**env), capture_output=True, text=True, timeout=120
    )


def try_it_block() -> str:
    text = README.read_text()
    after = text[text.index("Try it once `make run` is up") :]
    return after[after.index("```sh\n") + 6 : after.index("```\n")]


def port_with_free_metrics_ports() -> int:
    """A free PORT whose metrics ports (PORT + 1101..1104) and gateway port (PORT + 90), as make run
    derives them, are free too."""
    for _ in range(50):
        port = free_port()
        offsets = [90, *range(1101, 1105)]
        if port + 1104 <= 65535 and all(bindable(port + offset) for offset in offsets):
            return port
    raise RuntimeError("no free PORT with free metrics ports")


def up_or_ended(group: ProcessGroup, make: subprocess.Popen, port: int) -> bool:
    """Whether ``make run`` said it is up (True) or ended first (False)."""
    up = f"make run: up: http://127.0.0.1:{port}/api/products/ lists the catalogue; checkouts are accepted"
    try:
        wait_until(lambda: up in group.logs(tail=100_000) or make.poll() is not None, timeout=120, message="up")
    except TimeoutError:
        raise AssertionError(f"make run not up in 120 s:\n{ctrl_c(group, make)[-6000:]}") from None
    return make.poll() is None


def start_make_run(tmp_path: Path, env: dict[str, str]) -> tuple[ProcessGroup, subprocess.Popen, int]:
    """``make run`` on a free PORT, up: "make run: up" is said once checkouts are accepted (the
    catalogue is listed at that moment). A port taken between the check and the bind (by another
    process's outgoing connection) is the machine's race, not make run's: tried again on another
    port, at most three times. Any other early end fails with make run's own log."""
    for attempt in range(3):
        port = port_with_free_metrics_ports()  # no metrics variable set: make run derives them from PORT
        group = ProcessGroup(tmp_path / f"attempt-{attempt}", env)
        group.log_dir.mkdir()
        make = group.spawn("make-run", ["make", "run", f"PORT={port}"])
        if up_or_ended(group, make, port):
            return group, make, port
        output = ctrl_c(group, make)
        assert "already in use" in output, f"make run ended before it was up:\n{output[-6000:]}"
    raise AssertionError(f"make run found a taken port three times:\n{output[-6000:]}")


def test_the_readmes_try_it_block_as_pasted_against_make_run(tmp_path):
    env = clean_env(VAR_DIR=str(tmp_path / "var"), GATEWAY_CHARGE_ATTEMPTS="1")
    group, make, port = start_make_run(tmp_path, env)
    base = f"http://127.0.0.1:{port}"
    try:
        assert len(get_json(f"{base}/api/products/")) == 4
        with urllib.request.urlopen(f"http://127.0.0.1:{port + 1101}/metrics", timeout=5) as relay:
            assert "messaging_relay_published_total" in relay.read().decode()  # the relay's, on PORT + 1101

        # The block as written, only on this test's port; VAR_DIR (make run's folder) as its shell has it.
        pasted = shell(try_it_block().replace("localhost:8000", f"localhost:{port}"), VAR_DIR=str(tmp_path / "var"))

        assert pasted.returncode == 0, pasted.stderr
        products, order, replayed, ledger = pasted.stdout.splitlines()
        assert {p["sku"] for p in json.loads(products)} == {"WIDGET", "GADGET", "GIZMO", "LIMITED-PRINT"}
        order = json.loads(order)
        assert (order["status"], order["total"]) == ("CONFIRMED", "39.98")  # as the comment promises
        assert replayed.strip() == "Idempotent-Replayed: true"
        charge = json.loads(ledger)
        assert (charge["order_id"], charge["kind"], charge["amount"]) == (order["id"], "charge", "39.98")
        # The checkout's answer, shown by tee: one line of its own, not glued to the next answer.
        [placed] = pasted.stderr.splitlines(keepends=True)
        assert (json.loads(placed)["status"], placed[-2:]) == ("PENDING", "}\n")

        # A gateway that stays unavailable: the gateway worker tries again after a backoff, then
        # (GATEWAY_CHARGE_ATTEMPTS=1 here) gives the charge up and the order fails; no dead letter.
        stuck = checkout(base, "tok_unavailable")
        wait_until(lambda: status_of(base, stuck) == "FAILED", timeout=60, message=f"order {stuck} to fail")
        listing = shell("DEBUG=1 .venv/bin/python manage.py dead_letters list", VAR_DIR=str(tmp_path / "var"))
        assert listing.stdout == "no dead letters\n", listing
    finally:
        output = ctrl_c(group, make)
        print(output[-6000:])  # on a failure above, pytest shows make run's own log: which process stopped
    assert f"gateway call for order {stuck} failed, again in 0.5s: the gateway is unavailable" in output
    # The cosmetic list: clean access lines, no kombu warning, the broker as a folder, a quiet Ctrl-C.
    assert '"GET /api/products/ HTTP/1.1" 200' in output and "request=<socket" not in output
    assert "No hostname was supplied" not in output
    assert f"broker=filesystem://{tmp_path / 'var' / 'broker'}" in output
    assert "Interrupt" not in output and output.count("stopped (rc=0)") == 7, output[-3000:]


def split_free_ports() -> int:
    """A port with the next ones free as well: make run-split serves on PORT, PORT+1, ... one per
    installed context, and the fake gateway on PORT+90."""
    for _ in range(50):
        port = free_port()
        if all(bindable(port + n) for n in [*range(1, len(installed())), 90]):
            return port
    raise RuntimeError("no free PORT with the next ones free")


def split_processes() -> int:
    """How many processes make run-split starts: its Procfile's lines, from the installed list."""
    listed = subprocess.run(
        [sys.executable, "scripts/run_split.py", "--procfile-only"],
        cwd=BASE_DIR,
        env=clean_env(DEBUG="1"),
        capture_output=True,
        text=True,
        check=True,
    )
    return sum(1 for line in listed.stdout.splitlines() if line and not line.startswith("#"))


class AdminSession:
    """A staff login over HTTP, as a browser keeps it."""

    def __init__(self, base: str, username: str, password: str):
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        page = self.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        form = {"username": username, "password": password, "csrfmiddlewaretoken": token, "next": "/admin/"}
        self.opener.open(f"{base}/admin/login/", urllib.parse.urlencode(form).encode(), timeout=10).read()

    def get(self, path: str) -> str:
        return self.opener.open(self.base + path, timeout=10).read().decode()


def test_the_splits_hand_run_commands_as_make_and_the_order_page_print_them(tmp_path):
    port, split_var = split_free_ports(), tmp_path / "split"
    group = ProcessGroup(tmp_path, clean_env(CONSUMER_MAX_ATTEMPTS="2"))
    make = group.spawn("make-run-split", ["make", "run-split", f"PORT={port}", f"SPLIT_VAR={split_var}"])
    base = f"http://127.0.0.1:{port}"
    try:
        up = f"make run-split: up: {base}/api/products/ lists the catalogue; checkouts are accepted"
        wait_until(lambda: up in group.logs(tail=100_000), timeout=180, message="the split's up line")
        assert len(get_json(f"{base}/api/products/")) == 4
        banner = group.logs(tail=100_000)
        # the fake gateway follows PORT, as under make run: two splits never share one
        assert f"Gateway: the fake card gateway on http://127.0.0.1:{port + 90}/ (GATEWAY_PORT)" in banner
        assert get_json(f"http://127.0.0.1:{port + 90}/healthz") == {"status": "ok"}
        printed = [line.strip() for line in banner.splitlines() if line.strip().startswith("DEBUG=1 CONTEXTS=")]
        create_user, ledger_cmd, dead_letters_cmd = printed
        assert ledger_cmd.endswith("manage.py gateway_ledger") and f"DATABASE_URL=sqlite:///{split_var}/" in ledger_cmd

        # stuck: its charge in flight at payments, the gateway unavailable (given up only after a minute and a half)
        paid, stuck = checkout(base, "tok_visa"), checkout(base, "tok_unavailable")
        wait_until(lambda: status_of(base, paid) == "CONFIRMED", timeout=60, message="the paid order to be confirmed")

        # As printed, in a clean shell: payments' own ledger and dead letters, not the monolith's.
        ledger = shell(ledger_cmd)
        assert ledger.returncode == 0, ledger.stderr
        assert [(e["order_id"], e["kind"]) for e in map(json.loads, ledger.stdout.splitlines())] == [(paid, "charge")]

        # The orders deployment's page of the stuck order prints where to look, and that runs too.
        made = shell(f"{create_user} --noinput --username ops --email ops@example.com", DJANGO_SUPERUSER_PASSWORD="pw")
        assert made.returncode == 0, made.stderr
        page = AdminSession(base, "ops", "pw").get(f"/admin/orders/order/{stuck}/change/")
        banner_commands = {html.unescape(c) for c in re.findall(r'<code class="ops-command">([^<]+)</code>', page)}
        assert len(banner_commands) == 1, banner_commands
        [look_there] = banner_commands
        assert look_there == dead_letters_cmd + " --consumer payments"
        assert "no answer yet from payments" in page
        listed = shell(look_there)  # it runs as printed, against payments' own database: no dead letter there
        assert (listed.returncode, listed.stdout) == (0, "no dead letters for payments\n"), listed

        # make demo against the split: as the banner says, and without SPLIT=1 one clear line, no traceback.
        demo = shell(f"make demo SPLIT=1 PORT={port} SPLIT_VAR={split_var}")
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        assert "   - charges for this order: 1" in demo.stdout
        assert re.search(r"money moved \(the gateway's ledger\): charge (\d+\.\d\d), refund \1\n", demo.stdout)
        wrong = shell(f"make demo PORT={port}", VAR_DIR=str(tmp_path / "elsewhere"))
        assert wrong.returncode != 0 and "Traceback" not in wrong.stderr
        assert "`make demo SPLIT=1` against `make run-split`" in wrong.stderr
    finally:
        output = ctrl_c(group, make)
        print(output[-6000:])  # on a failure above, pytest shows the split's own log: which process stopped
    assert "Interrupt" not in output and output.count("stopped (rc=0)") == split_processes(), output[-3000:]


@pytest.mark.parametrize(
    ("command", "variable"),
    [
        (["run_outbox_relay"], "RELAY_METRICS_PORT"),
        (["run_consumers", "payments", "inventory"], "CONSUMERS_METRICS_PORT"),
        (["run_consumers", "orders", "events"], "ORDERS_CONSUMERS_METRICS_PORT"),
        (["expire_pending_orders", "--loop"], "DEADLINE_METRICS_PORT"),
    ],
)
def test_a_taken_metrics_port_is_one_line_naming_the_port_and_its_variable(tmp_path, command, variable):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "manage.py", *command, "--metrics-port", str(port)],
            cwd=BASE_DIR,
            env=clean_env(DEBUG="1", VAR_DIR=str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"CommandError: metrics port {port} is already in use on 127.0.0.1: set {variable} (make run) "
        "or --metrics-port to a free port, or stop what listens there"
    ]


def test_a_missing_secret_key_without_debug_is_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=BASE_DIR,
        env=clean_env(VAR_DIR=str(tmp_path), ALLOWED_HOSTS="shop.example.com"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [
        "Configuration error: SECRET_KEY not set: with DEBUG off set SECRET_KEY and ALLOWED_HOSTS "
        "(or DEBUG=1 on a development machine)"
    ]


def test_a_wrong_event_versions_pin_is_one_line(tmp_path):
    for pin, problem in (
        ("orders.order.created=9", "orders.order.created v9 is not a version this tree writes (1..4)"),
        ("orders.order.created", "'orders.order.created' is not <routing key>=<version>"),
    ):
        result = subprocess.run(
            [sys.executable, "manage.py", "check"],
            cwd=BASE_DIR,
            env=clean_env(DEBUG="1", VAR_DIR=str(tmp_path), EVENT_VERSIONS=pin),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (result.returncode, result.stdout) == (1, "")
        assert result.stderr.splitlines() == [f"Configuration error: EVENT_VERSIONS: {problem}"]


def test_a_split_deployment_finds_its_ledger_and_broker_beside_its_database(tmp_path):
    """Only DATABASE_URL, no VAR_DIR: the SQLite ledger and the filesystem broker follow it."""
    script = "from django.conf import settings as s; print(s.DATABASES['gateway']['NAME'], s.FILESYSTEM_BROKER_DIR)"
    env = clean_env(DEBUG="1", CONTEXTS="payments", DATABASE_URL=f"sqlite:///{tmp_path}/payments.sqlite3")
    shown = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script], cwd=BASE_DIR, env=env, capture_output=True, text=True
    )
    assert shown.stdout.splitlines()[-1].split() == [str(tmp_path / "gateway.sqlite3"), str(tmp_path / "broker")]
    named = {**env, "BROKER_URL": f"filesystem://{tmp_path}/shared-broker"}
    shown = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script], cwd=BASE_DIR, env=named, capture_output=True, text=True
    )
    assert Path(shown.stdout.splitlines()[-1].split()[1]) == tmp_path / "shared-broker"
