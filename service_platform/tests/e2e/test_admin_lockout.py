"""The admin's login lockout through real servers, on exact bytes over raw sockets (issue 26,
row 10: 133 wrong passwords in 15 s, then the right one, logged in).

``make run``'s server (``DEBUG`` on) and ``make serve``'s tier (nginx in front of two gunicorn
workers, ``DEBUG`` off): five wrong passwords lock the account at that address, the right one
included, whichever worker answers; a forged ``X-Forwarded-For`` does not make a new address;
another address still logs in; each refused attempt logs a line; ``manage.py
axes_reset_username`` unlocks.
"""

import re
import shutil
import urllib.parse
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import User

from faultlib.fixtures import ALL_DATABASES
from faultlib.processes import ProcessGroup
from faultlib.serve import request, start_tier, var_dir
from faultlib.web import start_web

pytestmark = pytest.mark.django_db(transaction=True, databases=ALL_DATABASES)

PASSWORD = "correct horse battery staple"
LOCKED = (
    b'<p class="errornote" id="login-locked-out">Too many failed logins for this account from your address: '
    b"logging in is locked for 15\xc2\xa0minutes. An operator can unlock it at once "
    b"(docs/operations.md, Admin lockout).</p>"
)
WRONG = b"Please enter the correct username and password for a staff account."


@dataclass
class Server:
    port: int
    group: ProcessGroup


@pytest.fixture(params=["runserver-debug", "make-serve"])
def server(request, process_env, tmp_path):
    group = ProcessGroup(tmp_path, {**process_env, "LOG_FORMAT": "json"})
    root = var_dir()
    try:
        if request.param == "make-serve":
            port = start_tier(group, root).port
        else:
            port = int(start_web(group, "runserver-debug").rsplit(":", 1)[1])
        yield Server(port, group)
    finally:
        group.stop_all()
        print(group.logs())
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def operator():
    return User.objects.create_superuser("ops", "ops@example.com", PASSWORD)


def log_in(server: Server, password: str, *, source: str = "127.0.0.1", extra: bytes = b"") -> str:
    """GET the login page for its CSRF cookie and token, POST the form; "in", "wrong" or "locked"."""
    page = request(server.port, b"GET /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", source=source)
    cookie = re.match(r"csrftoken=([^;]+)", page.headers["set-cookie"]).group(1)
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.body).group(1).decode()
    form = urllib.parse.urlencode(
        {"csrfmiddlewaretoken": token, "username": "ops", "password": password, "next": "/admin/"}
    ).encode()
    reply = request(
        server.port,
        b"POST /admin/login/?next=/admin/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n"
        + b"Cookie: csrftoken=%s\r\nContent-Length: %d\r\n" % (cookie.encode(), len(form))
        + extra
        + b"\r\n"
        + form,
        source=source,
    )
    if reply.status == 302 and reply.headers["location"] == "/admin/":
        return "in"
    if reply.status == 429 and LOCKED in reply.body:
        return "locked"
    assert (reply.status, WRONG in reply.body) == (200, True), (reply.status, reply.body[-2000:])
    return "wrong"


def lockout_lines(server: Server) -> list[tuple]:
    return [
        (line["event"], line["level"], line["username"], line["client_address"], line.get("failures"))
        for _, proc, _ in server.group.procs
        for line in server.group.log_lines(proc)
        if line.get("logger") == "service_platform.admin_lockout"
    ]


def test_five_wrong_passwords_lock_the_account_at_that_address_until_an_operator_unlocks_it(server, operator):
    tries = [log_in(server, "wrong") for _ in range(5)]
    right = log_in(server, PASSWORD)
    forged = log_in(server, PASSWORD, extra=b"X-Forwarded-For: 203.0.113.9\r\n")
    elsewhere = log_in(server, PASSWORD, source="127.0.0.2")

    assert tries == ["wrong"] * 4 + ["locked"]
    assert (right, forged, elsewhere) == ("locked", "locked", "in")
    assert lockout_lines(server) == [
        ("admin login locked out", "warning", "ops", "127.0.0.1", 5),
        ("admin login refused while locked out", "warning", "ops", "127.0.0.1", None),
        ("admin login refused while locked out", "warning", "ops", "127.0.0.1", None),
    ]

    unlocked = server.group.run("axes_reset_username", "ops")
    assert (unlocked.returncode, unlocked.stdout) == (0, "1 attempts removed.\n"), unlocked.stderr
    assert log_in(server, PASSWORD) == "in"
